"""Binary values printed as PostgreSQL's text form: golden pairs and properties.

The golden pairs were printed by PostgreSQL 18: each is a value's send format next to its
``::text``. ``tests/integration/test_binary_text_forms.py`` checks many more against live
PostgreSQL 18 and 15; the properties below need no server.

``decoder/textforms/builtin.py``'s table of builtin type OIDs to readers is a table, one row
a type: ``duplicates`` reports two stretches of it as a pair by shape.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import struct
from decimal import Decimal
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import adapt, postgres
from psycopg.adapt import PyFormat
from psycopg.pq import Format
from psycopg.types.multirange import Multirange, MultirangeInfo, register_multirange
from psycopg.types.range import Range, RangeInfo, register_range

from decoder import (
    ArrayType,
    MultirangeType,
    RangeType,
    UnknownBinaryFormatError,
    UserTypeForms,
    builtin_text_reader,
    float8_text,
    value_text,
)
from decoder.textforms import (
    Reader,
    array_text,
    float4_text,
    record_text,
    require_builtin_reader,
)
from sink import pg_text_form

# (type, send format as hex, text form), printed by PostgreSQL 18.
PG18_GOLDEN: tuple[tuple[str, str, str], ...] = (
    ("float4", "65a96816", "1e+23"),
    ("float4", "7f7fffff", "3.4028235e+38"),
    ("float4", "3dcccccd", "0.1"),
    ("float4", "00000001", "1e-45"),
    ("float4", "4b800000", "1.6777216e+07"),
    ("float4", "4c41d9c0", "5.0816768e+07"),
    ("float8", "44b52d02c7e14af6", "9.999999999999999e+22"),
    ("float8", "0000000000000001", "5e-324"),
    ("float8", "430c6bf526340000", "1e+15"),
    ("float8", "3f1a36e2eb1c432d", "0.0001"),
    ("float8", "436446f9935f1d62", "4.5660298139986704e+16"),
    (
        "numeric",
        "0008000240000014000c0d801ed204d2162e23340d801ed2",
        "-1234567890.12345678901234567890",
    ),
    ("numeric", "0002ffff00000005000107d0", "0.00012"),
    ("numeric", "00010002000000000001", "100000000"),
    ("numeric", "0000000000000003", "0.000"),
    ("numeric", "00000000f0000020", "-Infinity"),
    ("date", "ffda97cd", "4713-01-01 BC"),
    ("date", "7fda970c", "5874897-12-31"),
    ("date", "7fffffff", "infinity"),
    ("timestamp", "ff1af9e8fb4e7120", "0044-03-15 12:00:00.5 BC"),
    ("timestamptz", "7fffff5bb3b29fff", "294276-12-31 23:59:59.999999+00"),
    ("timestamptz", "8000000000000000", "-infinity"),
    ("inet", "0380001000000000000000000000ffff01020304", "::ffff:1.2.3.4"),
    ("inet", "0378001000000000000000000000000001020304", "::1.2.3.4/120"),
    ("inet", "03400010fe800000000000000001000000000001", "fe80::1:0:0:1/64"),
    ("cidr", "020801040a000000", "10.0.0.0/8"),
    ("inet", "0380001000010000000000010000000000000001", "1:0:0:1::1"),
    ("box", "3ff00000000000003ff000000000000000000000000000000000000000000000", "(1,1),(0,0)"),
    (
        "path",
        "0000000002000000000000000000000000000000003ff00000000000003ff0000000000000",
        "[(0,0),(1,1)]",
    ),
    ("circle", "3ff00000000000004000000000000000400c000000000000", "<(1,2),3.5>"),
    ("line", "3ff0000000000000bff00000000000003fe0000000000000", "{1,-1,0.5}"),
    (
        "int4[]",
        "000000020000000000000017000000020000000200000002ffffffff000000040000000100000004"
        "0000000200000004000000030000000400000004",
        "[2:3][-1:0]={{1,2},{3,4}}",
    ),
    (
        "text[]",
        "000000010000000100000019000000070000000100000003612062ffffffff000000044e554c4c00"
        "00000378227900000000000000027b7d0000000a6261636b5c736c617368",
        '{"a b",NULL,"NULL","x\\"y","","{}","back\\\\slash"}',
    ),
    (
        "box[]",
        "00000001000000000000025b0000000200000001000000203ff00000000000003ff0000000000000"
        "0000000000000000000000000000000000000020400800000000000040080000000000004000000000"
        "0000004000000000000000",
        "{(1,1),(0,0);(3,3),(2,2)}",
    ),
    ("int4range", "0200000004000000010000000400000005", "[1,5)"),
    ("tstzrange", "12000000080002b0d5d4e94000", '["2024-01-01 00:00:00+00",)'),
    (
        "int4multirange",
        "00000002000000110200000004000000010000000400000003000000110200000004000000050000"
        "000400000007",
        "{[1,3),[5,7)}",
    ),
    (
        "int2vector",
        "000000010000000000000015000000030000000000000002000100000002fffe000000020003",
        "1 -2 3",
    ),
    (
        "txid_snapshot",
        "00000003000000000000000a0000000000000014000000000000000a000000000000000e000000000000000f",
        "10:20:10,14,15",
    ),
)

# ROW(1, 'a "b"', NULL, '', ARRAY['x y']): fields int4, unknown (705), unknown, unknown,
# text[]; record_send carries each field's type OID.
PG18_RECORD = (
    "00000005000000170000000400000001000002c1000000056120226222000002c1ffffffff000002c1"
    "00000000000003f10000001b000000010000000000000019000000010000000100000003782079",
    '(1,"a ""b""",,"","{""x y""}")',
)


def oid(name: str) -> int:
    info = postgres.types.get(name.removesuffix("[]"))
    assert info is not None
    return info.array_oid if name.endswith("[]") else info.oid


def read(name: str) -> Reader:
    reader = builtin_text_reader(oid(name))
    assert reader is not None, name
    return reader


@pytest.mark.parametrize(("name", "data", "text"), PG18_GOLDEN)
def test_builtin_values_print_as_postgresql_18_printed_them(
    name: str, data: str, text: str
) -> None:
    assert read(name)(bytes.fromhex(data)) == text


def test_a_record_prints_each_field_with_the_reader_of_its_type_oid() -> None:
    def field(type_oid: int) -> Reader:
        reader = builtin_text_reader(25 if type_oid == 705 else type_oid)
        assert reader is not None
        return reader

    data, text = PG18_RECORD
    assert record_text(bytes.fromhex(data), field) == text


def test_types_without_a_ported_layout_have_no_reader() -> None:
    assert builtin_text_reader(oid("regclass")) is None
    assert builtin_text_reader(oid("regclass[]")) is None
    assert builtin_text_reader(987_654) is None


def test_an_element_type_without_a_reader_names_itself() -> None:
    data = struct.pack(">iiIii", 1, 0, oid("regclass"), 1, 1) + struct.pack(">iI", 4, 1259)
    with pytest.raises(UnknownBinaryFormatError, match=r"pg_catalog\.regclass.*binary: false"):
        array_text(data, require_builtin_reader)


@pytest.mark.parametrize(
    ("cents", "text"),
    [
        # cash_out under lc_monetary C, as PostgreSQL 18 printed each value.
        (-(2**63), "-$92,233,720,368,547,758.08"),
        (2**63 - 1, "$92,233,720,368,547,758.07"),
        (50, "$0.50"),
        (-100, "-$1.00"),
        (123_456_700, "$1,234,567.00"),
        (0, "$0.00"),
    ],
)
def test_money_prints_as_cash_out_under_lc_monetary_c(cents: int, text: str) -> None:
    reader = builtin_text_reader(oid("money"))
    assert reader is not None
    assert reader(struct.pack(">q", cents)) == text


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00" * 3, b"\x00" * 5],
    ids=["empty", "short", "long"],
)
def test_bytes_of_the_wrong_length_are_an_error_never_a_guess(data: bytes) -> None:
    for name in ("int4", "float4", "uuid", "bool", "date", "macaddr"):
        with pytest.raises((ValueError, struct.error, IndexError)):
            read(name)(data)


# --- properties ------------------------------------------------------------------------------


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float4_text_reads_back_to_the_same_float4(value: float) -> None:
    text = float4_text(value)
    back = struct.unpack(">f", struct.pack(">f", float(text)))[0]
    assert struct.pack(">f", back) == struct.pack(">f", value)
    assert read("float4")(struct.pack(">f", value)) == text


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float8_text_reads_back_to_the_same_float8(value: float) -> None:
    text = float8_text(value)
    assert struct.pack(">d", float(text)) == struct.pack(">d", value)
    # At least as long as the shortest round trip (repr), which may sit on a bound of
    # the rounding interval that PostgreSQL's Ryu excludes (4.5660298139986704e+16).
    digits = len(text.split("e")[0].replace("-", "").replace(".", "").strip("0")) or 1
    shortest = len(repr(abs(value)).split("e")[0].replace(".", "").strip("0")) or 1
    assert shortest <= digits <= 17


@given(st.dates())
def test_dates_within_python_range_print_in_iso_form(value: dt.date) -> None:
    days = (value - dt.date(2000, 1, 1)).days
    assert read("date")(struct.pack(">i", days)) == f"{value.year:04d}-{value:%m-%d}"


@given(st.datetimes(timezones=st.just(dt.UTC)))
def test_instants_within_python_range_print_in_utc(value: dt.datetime) -> None:
    micros = (value - dt.datetime(2000, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    text = read("timestamptz")(struct.pack(">q", micros))
    fraction = f".{value.microsecond:06d}".rstrip("0") if value.microsecond else ""
    assert text == f"{value.year:04d}-{value:%m-%d %H:%M:%S}{fraction}+00"


# Text PostgreSQL can hold: no NUL, no lone surrogates.
TEXTS = st.text(alphabet=st.characters(exclude_characters="\x00", exclude_categories=["Cs"]))
_TEXT_ARRAY_LOADER = adapt.Transformer().get_loader(oid("text[]"), Format.TEXT)


@given(st.lists(st.one_of(st.none(), TEXTS)))
def test_array_text_parses_back_to_its_elements(items: list[str | None]) -> None:
    data = struct.pack(">iiI", 1 if items else 0, None in items, oid("text"))
    if items:
        data += struct.pack(">ii", len(items), 1)
    for item in items:
        encoded = b"" if item is None else item.encode()
        data += struct.pack(">i", -1 if item is None else len(encoded)) + encoded
    text = read("text[]")(data)
    assert _TEXT_ARRAY_LOADER.load(text.encode()) == items


@given(st.lists(st.one_of(st.none(), TEXTS)))
def test_record_text_parses_back_to_its_fields(fields: list[str | None]) -> None:
    parts = [struct.pack(">i", len(fields))]
    for value in fields:
        if value is None:
            parts.append(struct.pack(">Ii", 25, -1))
        else:
            encoded = value.encode()
            parts.append(struct.pack(">Ii", 25, len(encoded)) + encoded)
    text = record_text(b"".join(parts), lambda _oid: read("text"))
    loader = adapt.Transformer().get_loader(postgres.types["record"].oid, Format.TEXT)
    # psycopg reads an empty unquoted field as NULL, as PostgreSQL's record_in does; a
    # lone NULL field prints as "()", which without the type reads as no field at all.
    expected = () if fields == [None] else tuple(fields)
    assert loader.load(text.encode()) == expected


# --- one value, two paths: its binary form read, and the value psycopg loads printed ---------
#
# The sink prints a value from its binary form (the readers) or, where it holds the Python
# value psycopg loaded, with ``value_text`` (``sink.pg_text_form``). Both must print what
# PostgreSQL prints. Each case: a type, the send format PostgreSQL 18.6 sent and the text
# form it printed for the same value (``::text``; inet and cidr as array elements, since
# their ``::text`` casts add the mask). The user range is
# ``CREATE TYPE textrange AS RANGE (subtype = text)``, with the OIDs it got.

TEXTRANGE, TEXTRANGES, TEXTMULTIRANGE = 16387, 16384, 16385
USER_TYPES = UserTypeForms(
    {
        TEXTRANGE: RangeType(TEXTRANGE, "public", "textrange", oid("text")),
        TEXTRANGES: ArrayType(TEXTRANGES, "public", "_textrange", TEXTRANGE),
        TEXTMULTIRANGE: MultirangeType(TEXTMULTIRANGE, "public", "textmultirange", TEXTRANGE),
    }.get
)
LOADING = adapt.AdaptersMap(postgres.adapters)
register_range(RangeInfo("textrange", TEXTRANGE, TEXTRANGES, subtype_oid=oid("text")), LOADING)
register_multirange(
    MultirangeInfo(
        "textmultirange", TEXTMULTIRANGE, 0, range_oid=TEXTRANGE, subtype_oid=oid("text")
    ),
    LOADING,
)
TRANSFORMER = adapt.Transformer(LOADING)

PG18_BOTH_PATHS: tuple[tuple[int, str, str], ...] = (
    # range_bound_escape doubles a quote and a backslash inside a quoted bound...
    (TEXTRANGE, "060000000361226200000003635c64", '["a""b","c\\\\d"]'),
    (
        TEXTMULTIRANGE,
        "000000020000000d02000000036122620000000163000000081200000003782079",
        '{["a""b",c),["x y",)}',
    ),
    # ...array_out escapes them with a backslash, around a range's own quoting.
    (
        TEXTRANGES,
        "00000001000000000000400300000001000000010000000d02000000036122620000000163",
        '{"[\\"a\\"\\"b\\",c)"}',
    ),
    # White space is ASCII only (array_isspace): U+00A0 and U+001C are not quoted.
    (
        oid("text[]"),
        "00000001000000000000001900000008000000010000000361226200000003635c64000000066e62"
        "c2a0737000000003781c79000000044e554c4c00000000000000046e756c6c00000003782c79",
        '{"a\\"b","c\\\\d",nb\xa0sp,x\x1cy,"NULL","","null","x,y"}',
    ),
    # inet_net_ntop prints an IPv4-mapped address in dotted form (Python's str does not).
    (oid("inet"), "0380001000000000000000000000ffff01020304", "::ffff:1.2.3.4"),
    (oid("cidr"), "0360011000000000000000000000ffff00000000", "::ffff:0.0.0.0/96"),
    (oid("numrange"), "120000000c000200000000000200011388", "[1.50,)"),
    (
        oid("tsrange"),
        "06000000080002b0d5d4e94000000000080002b0e9f2c84120",
        '["2024-01-01 00:00:00","2024-01-02 00:00:00.5"]',
    ),
)


@pytest.mark.parametrize(("type_oid", "data", "text"), PG18_BOTH_PATHS)
def test_a_binary_form_and_its_loaded_value_print_as_postgresql_18_printed_them(
    type_oid: int, data: str, text: str
) -> None:
    sent = bytes.fromhex(data)
    loaded = TRANSFORMER.get_loader(type_oid, Format.BINARY).load(sent)
    assert USER_TYPES.reader(type_oid)(sent) == text
    assert value_text(loaded) == text
    assert pg_text_form(loaded) == text


def _user_dumper(sample: object, type_oid: int) -> adapt.Dumper:
    # psycopg picks a range's dumper from its bounds' type: show it a range of texts.
    dumper = TRANSFORMER.get_dumper(sample, PyFormat.BINARY).upgrade(sample, PyFormat.BINARY)
    assert dumper.oid == type_oid
    return dumper


USER_DUMPERS = {
    TEXTRANGE: _user_dumper(Range("a", "b"), TEXTRANGE),
    TEXTMULTIRANGE: _user_dumper(Multirange([Range("a", "b")]), TEXTMULTIRANGE),
}


def _dumped(type_oid: int, value: object) -> bytes:
    """``value`` in ``type_oid``'s send format, as psycopg's binary dumpers write it."""
    dumper = USER_DUMPERS.get(type_oid) or LOADING.get_dumper_by_oid(type_oid, Format.BINARY)(
        type(value), TRANSFORMER
    )
    dumped = dumper.dump(value)
    assert dumped is not None
    return bytes(dumped)


_OFFSETS = st.integers(-15 * 3600, 15 * 3600).map(lambda s: dt.timezone(dt.timedelta(seconds=s)))
_BOUNDS = st.sampled_from(["[)", "(]", "[]", "()"])
_TEXT_RANGES = st.builds(Range, st.none() | TEXTS, st.none() | TEXTS, _BOUNDS)
_NUMERICS = st.decimals(-(10**30), 10**30, allow_nan=False, allow_infinity=False)
_ADDRESSES = st.ip_addresses()
LOADED_CASES = st.one_of(
    st.tuples(st.just(oid("bool")), st.booleans()),
    st.tuples(st.just(oid("float8")), st.floats()),
    st.tuples(
        st.just(oid("numeric")),
        _NUMERICS | st.sampled_from([Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")]),
    ),
    st.tuples(st.just(oid("date")), st.dates()),
    st.tuples(st.just(oid("timestamp")), st.datetimes()),
    st.tuples(
        st.just(oid("timestamptz")),
        st.datetimes(dt.datetime(2, 1, 1), dt.datetime(9998, 12, 31), timezones=_OFFSETS),
    ),
    st.tuples(st.just(oid("time")), st.times()),
    st.tuples(st.just(oid("timetz")), st.times(timezones=_OFFSETS)),
    st.tuples(st.just(oid("uuid")), st.uuids()),
    st.tuples(st.just(oid("inet")), _ADDRESSES),
    st.tuples(
        st.just(oid("inet")),
        _ADDRESSES.flatmap(
            lambda a: st.integers(0, a.max_prefixlen).map(
                lambda bits: ipaddress.ip_interface((a, bits))
            )
        ),
    ),
    st.tuples(
        st.just(oid("cidr")),
        _ADDRESSES.flatmap(
            lambda a: st.integers(0, a.max_prefixlen).map(
                lambda bits: ipaddress.ip_network((a, bits), strict=False)
            )
        ),
    ),
    st.tuples(st.just(oid("text[]")), st.lists(st.none() | TEXTS)),
    st.tuples(
        st.just(oid("text[]")),
        st.integers(1, 3).flatmap(
            lambda n: st.lists(st.lists(st.none() | TEXTS, min_size=n, max_size=n), min_size=1)
        ),
    ),
    st.tuples(st.just(TEXTRANGE), _TEXT_RANGES),
    st.tuples(st.just(TEXTMULTIRANGE), st.lists(_TEXT_RANGES).map(Multirange)),
    st.tuples(
        st.just(oid("numrange")), st.builds(Range, st.none() | _NUMERICS, st.none() | _NUMERICS)
    ),
)


@given(LOADED_CASES)
def test_a_binary_form_and_the_value_psycopg_loads_from_it_print_alike(
    case: tuple[int, object],
) -> None:
    type_oid, value = case
    sent = _dumped(type_oid, value)
    loaded = TRANSFORMER.get_loader(type_oid, Format.BINARY).load(sent)
    assert value_text(loaded) == USER_TYPES.reader(type_oid)(sent)


def test_a_value_psycopg_left_as_bytes_is_never_printed() -> None:
    with pytest.raises(UnknownBinaryFormatError, match="text mode"):
        value_text([UUID(int=1), b"\x00\x01"])
