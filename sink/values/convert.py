"""Sent column values (pgoutput's text or binary bytes) -> the values stored in Delta.

The sink's one value-conversion module. The column's Delta type (``typemap.delta_type``,
the type mapping) chooses the ``ValueForm``: ``TEXT`` keeps PostgreSQL's text form (sent as
is in text mode, printed from binary by ``decoder.textforms``/``decoder.usertypes`` or from
a loaded value by ``pg_text_form``); ``NATIVE``, ``DECIMAL`` and ``ARRAY`` go through the
decoder's psycopg loaders (``ValueDecoder.loader``, the one loader cache) and
``to_delta_value``. ``convert_value`` converts one value; ``column_converter`` resolves,
once per relation, a function per column that does the same without the per-value dispatch
(the planner's hot path).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Final

from decoder import (
    TEXT_KEPT_TYPE_OIDS,
    UNCHANGED_TOAST,
    ColumnKind,
    UnknownBinaryFormatError,
    ValueDecoder,
    builtin_text_reader,
    value_text,
)
from sink.values.typemap import DeltaType, PlanColumn, ValueForm
from sink.values.unrepresentable import UnrepresentableValueError, array_shape_is_plain


def convert_value(
    column: PlanColumn, kind: ColumnKind, data: bytes | None, decoder: ValueDecoder
) -> object:
    """Convert one sent column value (text or binary, not NULL) to its Delta value.

    Args:
        column: the column, with its PostgreSQL and Delta types.
        kind: ``ColumnKind.TEXT`` or ``ColumnKind.BINARY``.
        data: the value's bytes as pgoutput sends them.
        decoder: the value decoder (psycopg loaders by type OID).

    Returns:
        A value of ``column.delta``'s Arrow type.

    Raises:
        UnrepresentableValueError: the value exists but the Delta type cannot hold it.
        Exception: whatever the loader raises for bytes it cannot read; callers wrap it.
    """
    if column.delta.form is ValueForm.TEXT:
        assert data is not None
        if kind is ColumnKind.TEXT:
            # The text protocol already sends PostgreSQL's text form: keep it exactly.
            return data.decode("utf-8")
        text = binary_text_form(column.type_oid, data)
        if text is not None:
            return text
    if column.delta.form is ValueForm.ARRAY:
        assert data is not None
        _check_array_shape(column.delta, kind, data)
    if column.delta.form is ValueForm.NUMERIC_DOUBLE and kind is ColumnKind.TEXT:
        assert data is not None
        # float() reads numeric_out's text exactly as float8in would, NaN and Infinity
        # included.
        return float(data)
    loaded = decoder.decode_value(column.type_oid, kind, data)
    if column.delta.form is ValueForm.NUMERIC_DOUBLE:
        return _double(loaded)
    return to_delta_value(column.delta, loaded)


Converter = Callable[[bytes], object]
"""The sent bytes of one column (text or binary form, not NULL) -> its Delta value."""


def column_converter(column: PlanColumn, kind: ColumnKind, decoder: ValueDecoder) -> Converter:
    """The function that converts ``column``'s values sent as ``kind``, once per relation.

    It returns exactly what ``convert_value`` returns for the same bytes and raises the
    same exception classes, but skips the per-value dispatch (form, loader lookup by type
    OID and format, ``to_delta_value``'s match): text-kept values sent as text are their
    UTF-8 text, natively stored types are their psycopg loader's ``load``, ``DECIMAL``
    columns check the loaded value as ``to_delta_value`` does. Anything else - a binary
    value of a text-kept type that psycopg loads, such as uuid or jsonb - goes through
    ``convert_value`` itself.

    Args:
        column: the column, with its PostgreSQL and Delta types.
        kind: ``ColumnKind.TEXT`` or ``ColumnKind.BINARY``.
        decoder: the value decoder ``convert_value`` falls back to.
    """
    delta = column.delta
    if delta.form is ValueForm.TEXT:
        if kind is ColumnKind.TEXT:
            return _utf8
        text_form = binary_text_decoder(column.type_oid)
        if text_form is not None:
            return text_form
        # A user type (enum, domain, composite, their arrays): described from the source
        # catalog here, once per relation shape, so no catalog I/O happens per value.
        user_form = decoder.binary_text_reader(column.type_oid)
        if user_form is not None:
            return user_form
        return _generic_converter(column, kind, decoder)
    if column.type_oid in TEXT_KEPT_TYPE_OIDS:
        # The decoder loads these with loaders of its own; never the case for the types
        # typemap stores natively, but the generic path is right for anything.
        return _generic_converter(column, kind, decoder)
    # The decoder's loader cache: for these types its loaders are psycopg's own.
    load = decoder.loader(column.type_oid, kind)
    if delta.form is ValueForm.NATIVE:
        return load
    if delta.form is ValueForm.DECIMAL:

        def decimal(data: bytes) -> object:
            value = load(data)
            if type(value) is Decimal and value.is_finite():
                return value
            return checked_decimal(delta, value)

        return decimal

    if delta.form is ValueForm.NUMERIC_DOUBLE:
        if kind is ColumnKind.TEXT:
            return float  # as convert_value

        def double(data: bytes) -> object:
            return _double(load(data))

        return double

    def array(data: bytes) -> object:
        _check_array_shape(delta, kind, data)
        return to_delta_value(delta, load(data))

    return array


def _check_array_shape(delta: DeltaType, kind: ColumnKind, data: bytes) -> None:
    """Refuse an array psycopg would load without its lower bound (or flatten)."""
    if not array_shape_is_plain(kind, data):
        raise UnrepresentableValueError(
            f"an array with several dimensions or a lower bound other than 1 cannot be "
            f"stored in {delta.spark_sql}"
        )


def _double(value: object) -> float:
    """A loaded ``numeric`` as the nearest double (``sink.column_types: double``)."""
    if not isinstance(value, Decimal):
        raise UnrepresentableValueError(f"expected a numeric value, got {type(value).__name__}")
    return float(value)


def _utf8(data: bytes) -> str:
    # The text protocol already sends PostgreSQL's text form: keep it exactly.
    return data.decode("utf-8")


def _generic_converter(column: PlanColumn, kind: ColumnKind, decoder: ValueDecoder) -> Converter:
    def convert(data: bytes) -> object:
        return convert_value(column, kind, data, decoder)

    return convert


def to_delta_value(target: DeltaType, value: object) -> object:
    """Convert a value decoded by psycopg's loaders into a value of the Delta column.

    Args:
        target: the column's Delta type.
        value: a non-NULL decoded value.

    Returns:
        A value pyarrow accepts for ``target.arrow``.

    Raises:
        UnrepresentableValueError: the value cannot be stored without loss (NaN in a
            DECIMAL column, a multi-dimensional array); the message says why.
    """
    match target.form:
        case ValueForm.NATIVE:
            return value
        case ValueForm.DECIMAL:
            return checked_decimal(target, value)
        case ValueForm.NUMERIC_DOUBLE:
            return _double(value)
        case ValueForm.TEXT:
            return pg_text_form(value)
        case ValueForm.ARRAY:
            assert target.element is not None
            if not isinstance(value, list):
                raise UnrepresentableValueError(f"expected an array, got {type(value).__name__}")
            element = target.element
            out: list[object] = []
            for item in value:
                if isinstance(item, list):
                    raise UnrepresentableValueError(
                        f"multi-dimensional arrays cannot be stored in {target.spark_sql}"
                    )
                out.append(None if item is None else to_delta_value(element, item))
            return out


def checked_decimal(target: DeltaType, value: object) -> Decimal:
    """A loaded ``numeric`` value for the ``DECIMAL`` column ``target``, when it is finite.

    Raises:
        UnrepresentableValueError: ``value`` is not a ``Decimal``, or is NaN or infinite.
    """
    if not isinstance(value, Decimal):
        raise UnrepresentableValueError(f"expected a numeric value, got {type(value).__name__}")
    if not value.is_finite():
        # Only NaN and the infinities get here, so naming them reveals no row data.
        raise UnrepresentableValueError(
            f"{value} cannot be stored in {target.spark_sql}; store the column as "
            "string or double (sink.column_types) to keep it"
        )
    return value


# --- PostgreSQL text forms -----------------------------------------------------------------
#
# In text mode pgoutput already sends PostgreSQL's text form and the sink stores those bytes
# as they are. With ``binary true`` the value arrives in binary form: a builtin type whose
# layout the decoder ports (``decoder.textforms``, through ``binary_text_form``) is printed
# from its bytes; user types are printed by the decoder from the catalog's description
# (``decoder.usertypes``); any other value psycopg loads into a Python object, which
# ``pg_text_form`` prints with the same printer (``decoder.value_text``).

_RAW_BYTES: Final = (
    "the binary format of this type has no known text form; replicate the table in text "
    "mode (source binary: false)"
)


def pg_text_form(value: object) -> str:
    """``decoder.value_text``: a psycopg-loaded value printed as PostgreSQL's output
    function would, raw bytes refused as a value the sink cannot store.

    Raises:
        UnrepresentableValueError: the value (or one inside it) is raw bytes - a binary
            value nothing could read, its send format rather than its text.
    """
    try:
        return value_text(value)
    except UnknownBinaryFormatError as exc:
        raise UnrepresentableValueError(_RAW_BYTES) from exc


def optional_text(value: object) -> str | None:
    """``pg_text_form`` of a column value, None for NULL or an unchanged TOASTed value (the
    text of a key or a reject's stored value, which JSON keeps as null)."""
    if value is None or value is UNCHANGED_TOAST:
        return None
    return pg_text_form(value)


def binary_text_form(type_oid: int, data: bytes) -> str | None:
    """PostgreSQL's text form of a builtin type's binary value, printed from its layout.

    Returns:
        The text form, or None when the decoder has no port of the type's layout (psycopg
        then loads the value, or the type is not builtin).
    """
    decode = builtin_text_reader(type_oid)
    return None if decode is None else decode(data)


def binary_text_decoder(type_oid: int) -> Callable[[bytes], str] | None:
    """The function ``binary_text_form`` uses for ``type_oid``; None when it has none."""
    return builtin_text_reader(type_oid)
