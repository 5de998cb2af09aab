"""The PostgreSQL -> Delta type map and the value conversions that go with it."""

from __future__ import annotations

import datetime as dt
import ipaddress
import struct
from decimal import Decimal
from uuid import UUID

import pyarrow as pa
import pytest
from psycopg import postgres
from psycopg.types.range import Range

from sink.values.convert import (
    UnrepresentableValueError,
    binary_text_form,
    pg_text_form,
    to_delta_value,
)
from sink.values.typemap import (
    ARRAY_ELEMENT_OIDS,
    SCALAR_TYPE_NAMES,
    ValueForm,
    delta_type,
    numeric_precision_scale,
)


def typmod_numeric(precision: int, scale: int) -> int:
    """``atttypmod`` of numeric(precision, scale), as PostgreSQL's make_numeric_typmod."""
    return ((precision << 16) | (scale & 0x7FF)) + 4


def oid(name: str) -> int:
    return postgres.types[name].oid


def array_oid(name: str) -> int:
    return postgres.types[name].array_oid


def test_builtin_oids_in_the_table_match_postgresql_catalog() -> None:
    for type_oid, name in SCALAR_TYPE_NAMES.items():
        # psycopg registers the single-byte "char" type under its quoted name.
        registered = '"char"' if name == "char" else name
        assert postgres.types[registered].oid == type_oid, name
    for array, element in ARRAY_ELEMENT_OIDS.items():
        assert postgres.types[element].array_oid == array


@pytest.mark.parametrize(
    ("name", "spark_sql", "arrow"),
    [
        ("bool", "BOOLEAN", pa.bool_()),
        ("int2", "SMALLINT", pa.int16()),
        ("int4", "INT", pa.int32()),
        ("int8", "BIGINT", pa.int64()),
        ("float4", "FLOAT", pa.float32()),
        ("float8", "DOUBLE", pa.float64()),
        ("text", "STRING", pa.string()),
        ("varchar", "STRING", pa.string()),
        ("bpchar", "STRING", pa.string()),
        ("name", "STRING", pa.string()),
        ("bytea", "BINARY", pa.binary()),
        ("date", "DATE", pa.date32()),
        ("timestamptz", "TIMESTAMP", pa.timestamp("us", tz="UTC")),
        ("timestamp", "TIMESTAMP_NTZ", pa.timestamp("us")),
        ("oid", "BIGINT", pa.int64()),
    ],
)
def test_natively_mapped_scalar_types(name: str, spark_sql: str, arrow: pa.DataType) -> None:
    mapped = delta_type(oid(name), -1)
    assert (mapped.spark_sql, mapped.arrow, mapped.form) == (spark_sql, arrow, ValueForm.NATIVE)


@pytest.mark.parametrize(
    "name",
    [
        *("time", "timetz", "interval", "uuid", "json", "jsonb", "inet", "cidr", "macaddr"),
        *("money", "bit", "varbit", "xml", "point", "int4range", "tsvector", "xid"),
    ],
)
def test_types_without_a_faithful_delta_type_are_kept_as_postgresql_text(name: str) -> None:
    mapped = delta_type(oid(name), -1)
    assert (mapped.spark_sql, mapped.form) == ("STRING", ValueForm.TEXT)


def test_unknown_oids_such_as_enums_and_citext_are_kept_as_text() -> None:
    assert delta_type(987_654, -1).form is ValueForm.TEXT


@pytest.mark.parametrize(
    ("precision", "scale", "spark_sql"),
    [
        (10, 2, "DECIMAL(10,2)"),
        (38, 0, "DECIMAL(38,0)"),
        (38, 38, "DECIMAL(38,38)"),
        (1, 0, "DECIMAL(1,0)"),
        (2, -3, "DECIMAL(5,0)"),
        (3, 5, "DECIMAL(5,5)"),
    ],
)
def test_constrained_numeric_keeps_precision_and_scale(
    precision: int, scale: int, spark_sql: str
) -> None:
    mapped = delta_type(oid("numeric"), typmod_numeric(precision, scale))
    assert mapped.spark_sql == spark_sql
    assert mapped.form is ValueForm.DECIMAL
    assert mapped.arrow == pa.decimal128(*map(int, spark_sql[8:-1].split(",")))


def test_numeric_typmod_decoding_matches_postgresql_including_negative_scale() -> None:
    assert numeric_precision_scale(-1) is None
    assert numeric_precision_scale(typmod_numeric(12, 4)) == (12, 4)
    assert numeric_precision_scale(typmod_numeric(5, -2)) == (5, -2)


@pytest.mark.parametrize("typmod", [-1, typmod_numeric(39, 2), typmod_numeric(1000, 0)])
def test_unconstrained_or_too_wide_numeric_is_lossless_text(typmod: int) -> None:
    mapped = delta_type(oid("numeric"), typmod)
    assert (mapped.spark_sql, mapped.form) == ("STRING", ValueForm.TEXT)


@pytest.mark.parametrize(
    ("name", "spark_sql"),
    [
        ("int4", "ARRAY<INT>"),
        ("int8", "ARRAY<BIGINT>"),
        ("text", "ARRAY<STRING>"),
        ("bool", "ARRAY<BOOLEAN>"),
        ("float8", "ARRAY<DOUBLE>"),
        ("date", "ARRAY<DATE>"),
        ("timestamptz", "ARRAY<TIMESTAMP>"),
        ("timestamp", "ARRAY<TIMESTAMP_NTZ>"),
        ("bytea", "ARRAY<BINARY>"),
        ("varchar", "ARRAY<STRING>"),
    ],
)
def test_arrays_of_natively_mapped_elements_become_delta_arrays(name: str, spark_sql: str) -> None:
    mapped = delta_type(array_oid(name), -1)
    assert (mapped.spark_sql, mapped.form) == (spark_sql, ValueForm.ARRAY)
    assert mapped.element == delta_type(oid(name), -1)
    assert mapped.arrow == pa.list_(mapped.element.arrow)


def test_numeric_array_elements_take_the_column_typmod() -> None:
    constrained = delta_type(array_oid("numeric"), typmod_numeric(10, 2))
    assert constrained.spark_sql == "ARRAY<DECIMAL(10,2)>"
    unconstrained = delta_type(array_oid("numeric"), -1)
    assert unconstrained.spark_sql == "ARRAY<STRING>"
    assert unconstrained.element is not None
    assert unconstrained.element.form is ValueForm.TEXT


@pytest.mark.parametrize("name", ["uuid", "jsonb", "interval", "inet", "time"])
def test_arrays_of_text_kept_types_are_one_text_value(name: str) -> None:
    mapped = delta_type(array_oid(name), -1)
    assert (mapped.spark_sql, mapped.form) == ("STRING", ValueForm.TEXT)


def test_decimal_values_are_kept_and_non_finite_ones_rejected() -> None:
    mapped = delta_type(oid("numeric"), typmod_numeric(5, 2))
    assert to_delta_value(mapped, Decimal("1.50")) == Decimal("1.50")
    for special in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(UnrepresentableValueError, match=r"sink\.column_types"):
            to_delta_value(mapped, Decimal(special))


def test_multi_dimensional_arrays_are_rejected_with_the_reason() -> None:
    mapped = delta_type(array_oid("int4"), -1)
    assert to_delta_value(mapped, [1, None, 3]) == [1, None, 3]
    with pytest.raises(UnrepresentableValueError, match="multi-dimensional"):
        to_delta_value(mapped, [[1, 2], [3, 4]])


def test_unconstrained_numeric_array_elements_become_their_text() -> None:
    mapped = delta_type(array_oid("numeric"), -1)
    assert to_delta_value(mapped, [Decimal("1.50"), None, Decimal("NaN")]) == ["1.50", None, "NaN"]


def test_converted_values_are_accepted_by_arrow_with_their_scale() -> None:
    mapped = delta_type(oid("numeric"), typmod_numeric(10, 3))
    array = pa.array([to_delta_value(mapped, Decimal("1.5")), Decimal("1.2E+2")], mapped.arrow)
    assert array.to_pylist() == [Decimal("1.500"), Decimal("120.000")]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain", "plain"),
        (UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        (ipaddress.ip_address("10.0.0.1"), "10.0.0.1"),
        (ipaddress.ip_interface("10.0.0.1/24"), "10.0.0.1/24"),
        (ipaddress.ip_network("10.0.0.0/24"), "10.0.0.0/24"),
        (dt.time(12, 34, 56), "12:34:56"),
        (dt.time(12, 34, 56, 500000), "12:34:56.5"),
        (dt.time(1, 2, 3, 4), "01:02:03.000004"),
        (dt.time(12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))), "12:00:00+02"),
        (dt.time(12, 0, tzinfo=dt.timezone(-dt.timedelta(hours=5, minutes=30))), "12:00:00-05:30"),
        (Decimal("1.50"), "1.50"),
        (Decimal("1E-7"), "0.0000001"),
        (Decimal("NaN"), "NaN"),
        (Decimal("-Infinity"), "-Infinity"),
        (1.5, "1.5"),
        (2.0, "2"),
        (float("inf"), "Infinity"),
        (float("nan"), "NaN"),
        (True, "t"),
        (dt.date(99, 1, 2), "0099-01-02"),
        (dt.datetime(2024, 1, 2, 3, 4, 5, 600000), "2024-01-02 03:04:05.6"),
        (
            dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=1))),
            "2024-01-02 02:04:05+00",
        ),
        (
            ["a b", None, "NULL", 'q"t', "", "x,y", "back\\slash"],
            '{"a b",NULL,"NULL","q\\"t","","x,y","back\\\\slash"}',
        ),
        ([[1, 2], [3, None]], "{{1,2},{3,NULL}}"),
        ([UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")], "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}"),
        (Range(1, 5, "[)"), "[1,5)"),
        (Range(None, 5, "(]"), "(,5]"),
        (Range(empty=True), "empty"),
        (Range(dt.date(2024, 1, 1), dt.date(2024, 2, 1), "[)"), "[2024-01-01,2024-02-01)"),
        (
            Range(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2), "[)"),
            '["2024-01-01 00:00:00","2024-01-02 00:00:00")',
        ),
    ],
)
def test_binary_loaded_values_print_as_postgresql_text(value: object, text: str) -> None:
    assert pg_text_form(value) == text


def test_raw_bytes_of_an_unloaded_binary_value_are_never_printed_as_text() -> None:
    with pytest.raises(UnrepresentableValueError, match="text mode"):
        pg_text_form(b"\x00\x01")


@pytest.mark.parametrize(
    ("name", "data", "text"),
    [
        ("time", (86_400_000_000).to_bytes(8, "big"), "24:00:00"),
        ("time", (45_296_789_000).to_bytes(8, "big"), "12:34:56.789"),
        (
            "timetz",
            (45_296_000_000).to_bytes(8, "big") + (-19_800).to_bytes(4, "big", signed=True),
            "12:34:56+05:30",
        ),
        ("timetz", (0).to_bytes(8, "big") + (3_600).to_bytes(4, "big"), "00:00:00-01"),
        ("bit", (4).to_bytes(4, "big") + b"\xa0", "1010"),
        ("varbit", (10).to_bytes(4, "big") + b"\xff\xc0", "1111111111"),
        ('"char"', b"\x00", ""),
        ('"char"', b"x", "x"),
        ("macaddr", bytes.fromhex("08002b010203"), "08:00:2b:01:02:03"),
        ("point", struct.pack("!dd", 1.5, 2.0), "(1.5,2)"),
        ("pg_lsn", (0x16B374D848).to_bytes(8, "big"), "16/B374D848"),
        ("tid", (7).to_bytes(4, "big") + (3).to_bytes(2, "big"), "(7,3)"),
    ],
)
def test_binary_send_formats_without_a_faithful_loader_print_as_postgresql_text(
    name: str, data: bytes, text: str
) -> None:
    assert binary_text_form(oid(name), data) == text


def test_builtin_types_with_a_ported_layout_print_from_their_bytes() -> None:
    # Printed by decoder.textforms, not by psycopg's loader and Python's str (which
    # writes IPv4-mapped IPv6 addresses differently from PostgreSQL).
    assert binary_text_form(oid("uuid"), bytes(16)) == "00000000-0000-0000-0000-000000000000"
    assert (
        binary_text_form(
            oid("inet"), bytes([3, 128, 0, 16]) + bytes(10) + b"\xff\xff\x01\x02\x03\x04"
        )
        == "::ffff:1.2.3.4"
    )


def test_types_without_a_ported_layout_have_no_binary_text_form() -> None:
    assert binary_text_form(oid("regclass"), bytes(4)) is None
    assert binary_text_form(987_654, b"happy") is None
    assert binary_text_form(oid("money"), bytes(8)) == "$0.00"  # under lc_monetary C
