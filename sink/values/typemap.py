"""PostgreSQL column types to Delta (Spark SQL) and Arrow types (values: ``convert.py``).

Theory of operation
-------------------
A column's Delta type is a pure function of its type OID and type modifier, read from two
tables: ``_SCALARS`` for the types Delta holds natively and ``_ARRAYS`` for the array
types whose element is one of them. Every other type - time, timetz, interval, uuid,
json, jsonb, inet, money, bit strings, geometric types, ranges, enums, domains and
extension types such as citext - is stored as a STRING holding PostgreSQL's own text form,
which is lossless and is exactly what the text protocol sends.

Each ``DeltaType`` carries a ``ValueForm`` that says how a decoded value becomes an Arrow
value: ``NATIVE`` values (bool, int, float, str, bytes, date, datetime) go as they are,
``DECIMAL`` values are checked to be finite, ``TEXT`` values become their PostgreSQL text
form, ``ARRAY`` values are converted element by element and ``NUMERIC_DOUBLE`` values (a
numeric under ``sink.column_types: double``) become the nearest double.

Decisions (see docs/decisions/0019-sink-type-mapping.md, and
docs/decisions/0095-legal-values-a-delta-type-cannot-hold.md for edge values):

* ``numeric(p, s)`` becomes ``DECIMAL(p, s)`` keeping precision and scale. Spark cannot
  hold a negative scale or a scale above the precision, so ``numeric(2, -3)`` becomes
  ``DECIMAL(5, 0)`` and ``numeric(3, 5)`` ``DECIMAL(5, 5)``: the same values, exactly.
  Unconstrained ``numeric`` and anything needing more than 38 digits become STRING in
  PostgreSQL's text form (``NaN`` and ``Infinity`` included), because a DECIMAL would
  have to round.
* ``timestamp`` (without time zone) becomes ``TIMESTAMP_NTZ``, which Sail and Spark 4
  both support, so wall-clock values are stored without inventing a zone.
  ``timestamptz`` becomes ``TIMESTAMP`` (an instant, stored in UTC).
* ``oid`` becomes BIGINT because it is unsigned 32-bit.
* Arrays map to ``ARRAY<element>`` only when their element maps natively (or is numeric);
  other arrays are one STRING in PostgreSQL's array text form. Multi-dimensional values
  cannot live in a one-level ARRAY column, nor a lower bound other than 1: such values,
  like ``±infinity`` and out-of-range dates or NaN in a DECIMAL, are stored under the
  conventions of ``unrepresentable.py``, their exact text kept in the rejects table.
* ``sink.column_types`` overrides the mapping per column (``delta_type``'s ``override``):
  ``string`` stores any type as PostgreSQL's text form, ``double`` a numeric as DOUBLE.
* User-defined types - enums, domains (whatever their base type), composites, ranges and
  arrays of them - are STRING in PostgreSQL's text form in both protocol modes, so the
  Delta type never depends on the mode or on the catalog. In binary mode the decoder
  prints their send format the way their output function would (``decoder.usertypes``);
  a type whose binary layout is unknown stops the sink naming it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from sink.constants import ColumnTypeOverride

MAX_DECIMAL_PRECISION: Final = 38
_VARHDRSZ: Final = 4


class ValueForm(enum.Enum):
    """How a decoded PostgreSQL value becomes a value of the Delta column."""

    NATIVE = "native"
    DECIMAL = "decimal"
    TEXT = "text"
    ARRAY = "array"
    NUMERIC_DOUBLE = "numeric_double"


@dataclass(frozen=True, slots=True)
class DeltaType:
    """The Delta column type of one PostgreSQL column type.

    Attributes:
        spark_sql: the type in Spark SQL DDL (``DECIMAL(10,2)``, ``ARRAY<BIGINT>``).
        arrow: the Arrow type used to ship values to Spark and to read them back.
        form: how a decoded value is converted (see ``to_delta_value``).
        element: the element type of an ``ARRAY`` form.
    """

    spark_sql: str
    arrow: pa.DataType
    form: ValueForm
    element: DeltaType | None = None


BOOLEAN: Final = DeltaType("BOOLEAN", pa.bool_(), ValueForm.NATIVE)
SMALLINT: Final = DeltaType("SMALLINT", pa.int16(), ValueForm.NATIVE)
INT: Final = DeltaType("INT", pa.int32(), ValueForm.NATIVE)
BIGINT: Final = DeltaType("BIGINT", pa.int64(), ValueForm.NATIVE)
FLOAT: Final = DeltaType("FLOAT", pa.float32(), ValueForm.NATIVE)
DOUBLE: Final = DeltaType("DOUBLE", pa.float64(), ValueForm.NATIVE)
STRING: Final = DeltaType("STRING", pa.string(), ValueForm.NATIVE)
TEXT_FORM: Final = DeltaType("STRING", pa.string(), ValueForm.TEXT)
BINARY: Final = DeltaType("BINARY", pa.binary(), ValueForm.NATIVE)
DATE: Final = DeltaType("DATE", pa.date32(), ValueForm.NATIVE)
TIMESTAMP: Final = DeltaType("TIMESTAMP", pa.timestamp("us", tz="UTC"), ValueForm.NATIVE)
TIMESTAMP_NTZ: Final = DeltaType("TIMESTAMP_NTZ", pa.timestamp("us"), ValueForm.NATIVE)
NUMERIC_DOUBLE: Final = DeltaType("DOUBLE", pa.float64(), ValueForm.NUMERIC_DOUBLE)

NUMERIC_OID: Final = 1700
NUMERIC_ARRAY_OID: Final = 1231

# Built-in type OIDs are fixed in PostgreSQL's catalog (pg_type.dat); the unit tests check
# this table against psycopg's type registry.
_SCALARS: Final[Mapping[int, tuple[str, DeltaType]]] = {
    16: ("bool", BOOLEAN),
    17: ("bytea", BINARY),
    18: ("char", TEXT_FORM),
    19: ("name", STRING),
    20: ("int8", BIGINT),
    21: ("int2", SMALLINT),
    23: ("int4", INT),
    25: ("text", STRING),
    26: ("oid", BIGINT),
    700: ("float4", FLOAT),
    701: ("float8", DOUBLE),
    1042: ("bpchar", STRING),
    1043: ("varchar", STRING),
    1082: ("date", DATE),
    1114: ("timestamp", TIMESTAMP_NTZ),
    1184: ("timestamptz", TIMESTAMP),
}

# Array type OID -> element type OID, for arrays stored as ARRAY<element>.
_ARRAYS: Final[Mapping[int, int]] = {
    1000: 16,  # _bool
    1001: 17,  # _bytea
    1003: 19,  # _name
    1016: 20,  # _int8
    1005: 21,  # _int2
    1007: 23,  # _int4
    1009: 25,  # _text
    1028: 26,  # _oid
    1021: 700,  # _float4
    1022: 701,  # _float8
    1014: 1042,  # _bpchar
    1015: 1043,  # _varchar
    1182: 1082,  # _date
    1115: 1114,  # _timestamp
    1185: 1184,  # _timestamptz
    NUMERIC_ARRAY_OID: NUMERIC_OID,
}

SCALAR_TYPE_NAMES: Final[Mapping[int, str]] = {oid: name for oid, (name, _) in _SCALARS.items()}
ARRAY_ELEMENT_OIDS: Final = _ARRAYS


def numeric_precision_scale(type_modifier: int) -> tuple[int, int] | None:
    """Decode ``numeric``'s typmod into (precision, scale); None when unconstrained.

    Mirrors ``NUMERIC_TYPMOD_PRECISION``/``NUMERIC_TYPMOD_SCALE`` in PostgreSQL's
    numeric.c: the scale is an 11-bit signed field since PostgreSQL 15.
    """
    if type_modifier < _VARHDRSZ:
        return None
    packed = type_modifier - _VARHDRSZ
    precision = (packed >> 16) & 0xFFFF
    scale = ((packed & 0x7FF) ^ 1024) - 1024
    return precision, scale


def _numeric_type(type_modifier: int) -> DeltaType:
    constraint = numeric_precision_scale(type_modifier)
    if constraint is None:
        return TEXT_FORM
    precision, scale = constraint
    if scale < 0:
        # numeric(2, -3) holds integers of up to 5 digits.
        precision, scale = precision - scale, 0
    elif scale > precision:
        # numeric(3, 5) holds values below 0.001 with 5 fractional digits.
        precision = scale
    if precision > MAX_DECIMAL_PRECISION:
        return TEXT_FORM
    return DeltaType(
        f"DECIMAL({precision},{scale})", pa.decimal128(precision, scale), ValueForm.DECIMAL
    )


def _element_type(element_oid: int, type_modifier: int) -> DeltaType:
    if element_oid == NUMERIC_OID:
        return _numeric_type(type_modifier)
    return _SCALARS[element_oid][1]


class ColumnTypeError(ValueError):
    """A ``sink.column_types`` override that the column's type cannot take."""


def delta_type(
    type_oid: int, type_modifier: int, override: ColumnTypeOverride | None = None
) -> DeltaType:
    """Map a PostgreSQL column type to its Delta type.

    Args:
        type_oid: ``RelationColumn.type_oid``.
        type_modifier: ``RelationColumn.type_modifier`` (``atttypmod``; -1 when none).
            For arrays it is the element's modifier, as in ``pg_attribute``.
        override: the column's ``sink.column_types`` entry: ``string`` stores PostgreSQL's
            text form of any type (exact for every value); ``double`` stores a ``numeric``
            as DOUBLE (rounded to the nearest double; NaN and the infinities exact).

    Returns:
        The Delta type; unknown types map to STRING holding PostgreSQL's text form.

    Raises:
        ColumnTypeError: ``double`` for a column that is not ``numeric``.
    """
    if override == "string":
        return TEXT_FORM
    if override == "double":
        if type_oid != NUMERIC_OID:
            raise ColumnTypeError(
                f"only numeric columns can be stored as double (type OID {type_oid}); "
                "use string to keep any type exactly"
            )
        return NUMERIC_DOUBLE
    if type_oid == NUMERIC_OID:
        return _numeric_type(type_modifier)
    scalar = _SCALARS.get(type_oid)
    if scalar is not None:
        return scalar[1]
    element_oid = _ARRAYS.get(type_oid)
    if element_oid is not None:
        element = _element_type(element_oid, type_modifier)
        return DeltaType(
            f"ARRAY<{element.spark_sql}>", pa.list_(element.arrow), ValueForm.ARRAY, element
        )
    return TEXT_FORM


@dataclass(frozen=True, slots=True)
class PlanColumn:
    """One source column as the plan and the Delta table see it.

    Attributes:
        name: the column's name in Delta: the source name, or its ``naming`` map under
            ``sink.column_names: map``.
        type_oid: the source type.
        type_modifier: the source type modifier.
        delta: the Delta type.
        renamed_from: the source (PostgreSQL) name when ``name`` differs from it.
    """

    name: str
    type_oid: int
    type_modifier: int
    delta: DeltaType
    renamed_from: str | None = None

    @property
    def source_name(self) -> str:
        """The column's name in PostgreSQL (the relation, the catalog, the configuration)."""
        return self.name if self.renamed_from is None else self.renamed_from
