"""Sent column values (pgoutput's text or binary bytes) -> the values stored in Delta.

The sink's side of value conversion: the column's Delta type (``typemap.delta_type``)
chooses the form - ``TEXT`` keeps PostgreSQL's text form (printed from binary by
``decoder.textforms`` and ``decoder.usertypes``), ``NATIVE``, ``DECIMAL`` and arrays go
through psycopg's loaders and ``typemap.to_delta_value``. ``convert_value`` converts one
value; ``column_converter`` resolves, once per relation, a function per column that does
the same without the per-value dispatch (the planner's hot path).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING

from decoder import TEXT_KEPT_TYPE_OIDS, ColumnKind, ValueDecoder
from sink.typemap import (
    ValueForm,
    binary_text_decoder,
    binary_text_form,
    checked_decimal,
    to_delta_value,
)

if TYPE_CHECKING:
    from sink.plan import PlanColumn


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
    loaded = decoder.decode_value(column.type_oid, kind, data)
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

    def array(data: bytes) -> object:
        return to_delta_value(delta, load(data))

    return array


def _utf8(data: bytes) -> str:
    # The text protocol already sends PostgreSQL's text form: keep it exactly.
    return data.decode("utf-8")


def _generic_converter(column: PlanColumn, kind: ColumnKind, decoder: ValueDecoder) -> Converter:
    def convert(data: bytes) -> object:
        return convert_value(column, kind, data, decoder)

    return convert
