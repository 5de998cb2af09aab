"""Binary values printed as PostgreSQL prints them, with PostgreSQL as the oracle.

Every case asks the server for one value twice - in binary (the type's send function,
what pgoutput sends with ``binary true``) and as text (its output function, what text
mode sends) - and the reader of ``decoder.textforms``/``decoder.usertypes`` must turn the
first into the second exactly. User types are described by the real catalog
(``PostgresCatalog.describe_type``). Random values go the other way: hypothesis draws
binary forms, PostgreSQL reads them as parameters (``*_recv``) and prints them.

The session uses PostgreSQL's default output settings explicitly, as the walsender does.
Every server version runs them, 14 to 18.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from decimal import Decimal

import psycopg
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.types.numeric import DecimalBinaryDumper

from capture.catalog import PostgresCatalog
from decoder import (
    ArrayType,
    CompositeType,
    DomainType,
    EnumType,
    OpaqueType,
    UnknownBinaryFormatError,
    UserTypeForms,
    builtin_text_reader,
)
from devtools.pgserver import LocalPostgres
from tests.conftest import fresh_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

Conn = psycopg.Connection[tuple[object, ...]]
DEFAULT_OUTPUT = (
    "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, MDY'; SET IntervalStyle = 'postgres';"
    "SET extra_float_digits = 1; SET bytea_output = 'hex'; SET lc_monetary = 'C'"
)

# (type, SQL expression) of builtin values, including the edges of each output function.
BUILTIN_CASES: tuple[tuple[str, str], ...] = (
    ("bool", "true"),
    ("bool", "false"),
    ("bytea", r"'\x00ff10'"),
    ("bytea", r"'\x'"),
    ('"char"', "'x'"),
    ('"char"', "''"),
    ('"char"', r"'\351'"),
    ("name", "'a name'"),
    ("int2", "-32768"),
    ("int4", "2147483647"),
    ("int8", "-9223372036854775808"),
    ("oid", "4294967295"),
    ("xid", "'4294967295'"),
    ("cid", "'7'"),
    ("xid8", "'18446744073709551615'"),
    ("tid", "'(4294967295,65535)'"),
    ("int2vector", "'1 -2 3'"),
    ("int2vector", "''"),
    ("oidvector", "'1 4294967295'"),
    ("text", "'ünïcödé \"q\" \\ x'"),
    ("varchar(5)", "'ab'"),
    ("char(5)", "'ab'"),
    ("float4", "1.5"),
    ("float4", "0.1"),
    ("float4", "3.4028235e38"),
    ("float4", "1e-45"),
    ("float4", "123456"),
    ("float4", "1234567"),
    ("float4", "0.0001"),
    ("float4", "0.00001"),
    ("float4", "'-0'"),
    ("float4", "'NaN'"),
    ("float4", "'-Infinity'"),
    ("float8", "0.1"),
    ("float8", "1e15"),
    ("float8", "123456789012345"),
    ("float8", "1e-5"),
    ("float8", "5e-324"),
    ("float8", "'Infinity'"),
    ("float8", "'-0'"),
    ("numeric", "0"),
    ("numeric", "0.000"),
    ("numeric", "-1234567890.12345678901234567890"),
    ("numeric", "0.00012"),
    ("numeric", "100000000"),
    ("numeric", "1e-20"),
    ("numeric", "'NaN'"),
    ("numeric", "'Infinity'"),
    ("numeric", "'-Infinity'"),
    ("numeric(3, -2)", "12300"),
    ("numeric(3, 5)", "0.00123"),
    ("money", "'-1234567.5'"),
    ("money", "'-92233720368547758.08'"),
    ("money", "0"),
    ("date", "'2024-02-29'"),
    ("date", "'0001-01-01'"),
    ("date", "'4713-01-01 BC'"),
    ("date", "'5874897-12-31'"),
    ("date", "'infinity'"),
    ("date", "'-infinity'"),
    ("time", "'24:00:00'"),
    ("time", "'12:34:56.789'"),
    ("timetz", "'12:34:56.789+05:30'"),
    ("timetz", "'00:00:00-01:02:03'"),
    ("timestamp", "'9999-12-31 23:59:59.999999'"),
    ("timestamp", "'0044-03-15 12:00:00 BC'"),
    ("timestamp", "'294276-12-31 23:59:59'"),
    ("timestamp", "'infinity'"),
    ("timestamptz", "'2024-03-31 01:30:00.5+02'"),
    ("timestamptz", "'1000-01-01 00:00:00+00 BC'"),
    ("timestamptz", "'-infinity'"),
    ("interval", "'1 year 2 mons 3 days 04:05:06.7'"),
    ("interval", "'-1 days +00:00:01'"),
    ("uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"),
    ("inet", "'192.168.0.1/24'"),
    ("inet", "'192.168.0.1'"),
    ("inet", "'::1'"),
    ("inet", "'::ffff:1.2.3.4'"),
    ("inet", "'::1.2.3.4/120'"),
    ("inet", "'fe80::1:0:0:1/64'"),
    ("inet", "'1:0:0:1:0:0:0:1'"),
    ("inet", "'0:0:1::'"),
    ("cidr", "'10.0.0.0/8'"),
    ("cidr", "'192.168.1.1/32'"),
    ("cidr", "'::/0'"),
    ("cidr", "'2001:db8::/32'"),
    ("macaddr", "'08:00:2b:01:02:03'"),
    ("macaddr8", "'08:00:2b:01:02:03:04:05'"),
    ("bit(4)", "B'1010'"),
    ("varbit", "B''"),
    ("varbit", "B'111111111'"),
    ("point", "'(1.5,-2)'"),
    ("lseg", "'[(0,0),(1e300,0.1)]'"),
    ("box", "'(1,1),(0,0)'"),
    ("path", "'((0,0),(1,1),(2,0))'"),
    ("path", "'[(0,0),(1,1)]'"),
    ("polygon", "'((0,0),(1,1),(2,0))'"),
    ("line", "'{1,-1,0.5}'"),
    ("circle", "'<(1,2),3.5>'"),
    ("pg_lsn", "'16/B374D848'"),
    ("json", """'{"b": 1,  "a": [1, 2]}'"""),
    ("jsonb", """'{"b": 1,  "a": [1, 2]}'"""),
    ("jsonpath", "'$.a[*] ? (@ > 1)'"),
    ("txid_snapshot", "'10:20:10,14,15'"),
    ("pg_snapshot", "'10:20:'"),
    ("int4range", "'[1,5)'"),
    ("int4range", "'empty'"),
    ("int8range", "'(,5]'"),
    ("numrange", "'[1.5,)'"),
    ("daterange", "'[2024-01-01,infinity)'"),
    ("tstzrange", "'[2024-01-01 00:00:00+00,2024-01-02 00:00:00+00)'"),
    ("tsrange", "'(,)'"),
    ("int4multirange", "'{[1,3), [5,7)}'"),
    ("datemultirange", "'{}'"),
    ("int4[]", "'{1,NULL,-2}'"),
    ("int4[]", "'{}'"),
    ("int4[]", "'[0:1]={1,2}'"),
    ("int4[]", "'{{1,2},{3,4}}'"),
    ("int4[]", "'[2:3][-1:0]={{1,2},{3,4}}'"),
    ("text[]", """'{"a b",NULL,"NULL","null","x\\"y","","{}","a,b","back\\\\slash","tab\tx"}'"""),
    ("bytea[]", """'{"\\\\x00",NULL}'"""),
    ("float4[]", "'{1.25,NaN,0.1}'"),
    ("numeric[]", "'{1.5,NaN,-0.000001}'"),
    ("timestamptz[]", """'{"2024-01-01 00:00:00+00",infinity}'"""),
    ("interval[]", """'{"1 day",-00:00:01}'"""),
    ("jsonb[]", """'{"{\\"k\\": 1}"}'"""),
    ("box[]", "'{(1,1),(0,0);(3,3),(2,2)}'"),
    ("point[]", "'{\"(1,2)\",NULL}'"),
    ("int4range[]", "'{\"[1,2)\",empty}'"),
    ("inet[]", "'{::ffff:1.2.3.4,10.0.0.1/8}'"),
    ("uuid[]", "'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'"),
    ('"char"[]', "'{a,\"\"}'"),
)

USER_TYPES_DDL = """
CREATE TYPE mood AS ENUM ('sad', 'happy', 'with space', 'NULL', 'quo"te', '');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE DOMAIN money2 AS numeric(12, 2);
CREATE DOMAIN label AS text;
CREATE DOMAIN ints AS int[];
CREATE DOMAIN nested_posint AS posint;
CREATE DOMAIN boxd AS box;
CREATE TYPE inner_pair AS (a int, b text);
CREATE TYPE outer_rec AS (
    id posint, note text, feeling mood, pair inner_pair, tags text[], moods mood[],
    at timestamptz, amount money2, raw bytea, f4 float4
);
CREATE TYPE dropped_field AS (a int, gone text, c text);
ALTER TYPE dropped_field DROP ATTRIBUTE gone;
CREATE TYPE posrange AS RANGE (subtype = posint);
CREATE TYPE labelrange AS RANGE (subtype = label);
"""

# (type, SQL expression) of user types and their containers.
USER_CASES: tuple[tuple[str, str], ...] = (
    ("mood", "'happy'"),
    ("mood", "'with space'"),
    ("mood", "''"),
    ("mood[]", """'{sad,"with space",NULL,"NULL","quo\\"te",""}'"""),
    ("mood[]", "'[0:1]={sad,happy}'"),
    ("posint", "42"),
    ("money2", "1234.5"),
    ("label", "'a label'"),
    ("ints", "'{1,NULL}'"),
    ("nested_posint", "7"),
    ("posint[]", "'{1,2,NULL}'"),
    ("money2[]", "'{1.5,NULL}'"),
    ("label[]", """'{"a b",x}'"""),
    ("boxd[]", "'{(1,1),(0,0);(3,3),(2,2)}'"),
    ("inner_pair", "ROW(1, 'x')"),
    ("inner_pair", "ROW(NULL, NULL)"),
    ("inner_pair", """ROW(2, '')"""),
    ("inner_pair", """ROW(3, 'a "quoted", (parenthesised) \\ value')"""),
    ("inner_pair[]", """ARRAY[ROW(1, 'x'), NULL, ROW(NULL, 'a b'), ROW(2, '')]::inner_pair[]"""),
    (
        "outer_rec",
        """ROW(1, 'note, with comma', 'with space', ROW(2, 'in "pair"'),
              ARRAY['a b', NULL, 'c'], ARRAY['sad', 'NULL']::mood[],
              '2024-01-01 12:00:00+02', 12.5, '\\x00ff', 0.1)::outer_rec""",
    ),
    ("outer_rec", "ROW(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::outer_rec"),
    (
        "outer_rec",
        "ROW(1, '', '', ROW(NULL, NULL), '{}', '{}', 'infinity', 0, '', 'NaN')::outer_rec",
    ),
    (
        "outer_rec[]",
        """ARRAY[ROW(1, 'x', 'sad', ROW(1, 'y'), ARRAY['z'], ARRAY['happy']::mood[],
                   NULL, 1, NULL, 1.5)::outer_rec, NULL]""",
    ),
    ("dropped_field", "ROW(1, 'c')::dropped_field"),
    ("posrange", "'[1,10)'"),
    ("labelrange", """'["a b",z]'"""),
    # range_bound_escape doubles a quote and a backslash; array_out escapes them.
    ("labelrange", """labelrange('a"b', 'c\\d', '[]')"""),
    ("labelrange", """labelrange(E'nb\\u00a0sp', E'x\\x1cy')"""),
    ("labelrange[]", """ARRAY[labelrange('a"b', 'c\\d'), 'empty']"""),
    ("labelmultirange", """labelmultirange(labelrange('a"b', 'c'), labelrange('x y', NULL))"""),
)


@pytest.fixture(params=["pg18", "pg17", "pg16", "pg15", "pg14"])
def server(request: pytest.FixtureRequest) -> LocalPostgres:
    server: LocalPostgres = request.getfixturevalue(request.param)
    return server


@pytest.fixture
def dsn(server: LocalPostgres) -> Iterator[str]:
    yield from fresh_database(server)


def both_forms(conn: Conn, expression: str, type_name: str) -> tuple[int, bytes, str]:
    """The OID of ``type_name`` and a value's binary and text forms, from the server."""
    query = sql.SQL("SELECT ({})::{}, {}::regtype::oid").format(
        sql.SQL(expression), sql.SQL(type_name), sql.Literal(type_name)
    )
    data = query.as_bytes(conn)
    binary = conn.pgconn.exec_params(data, [], result_format=1)
    text = conn.pgconn.exec_params(data, [], result_format=0)
    assert binary.status == text.status == psycopg.pq.ExecStatus.TUPLES_OK, (
        binary.error_message or text.error_message
    )
    raw, printed, oid = binary.get_value(0, 0), text.get_value(0, 0), text.get_value(0, 1)
    assert raw is not None
    assert printed is not None
    assert oid is not None
    return int(oid), bytes(raw), bytes(printed).decode()


def connect(dsn: str) -> Conn:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(DEFAULT_OUTPUT)
    return conn


NEEDS_15 = frozenset({"numeric(3, -2)", "numeric(3, 5)"})
"""Type modifiers PostgreSQL 14 refuses: a numeric scale below 0 or above the precision."""


def test_builtin_binary_values_print_as_postgresql_prints_them(dsn: str) -> None:
    mismatches = []
    with connect(dsn) as conn:
        major = conn.info.server_version // 10000
        for type_name, expression in BUILTIN_CASES:
            if major < 15 and type_name in NEEDS_15:
                continue
            oid, binary, text = both_forms(conn, expression, type_name)
            reader = builtin_text_reader(oid)
            assert reader is not None, type_name
            if reader(binary) != text:
                mismatches.append((type_name, expression, reader(binary), text))
    assert not mismatches


def test_user_types_print_as_postgresql_prints_them_from_the_catalog_description(
    dsn: str,
) -> None:
    mismatches = []
    with connect(dsn) as conn, PostgresCatalog(dsn) as catalog:
        conn.execute(USER_TYPES_DDL)
        forms = UserTypeForms(catalog.describe_type)
        for type_name, expression in USER_CASES:
            oid, binary, text = both_forms(conn, expression, type_name)
            got = forms.reader(oid)(binary)
            if got != text:
                mismatches.append((type_name, got, text))
    assert not mismatches


def test_the_catalog_describes_each_kind_of_user_type(dsn: str) -> None:
    with connect(dsn) as conn, PostgresCatalog(dsn) as catalog:
        conn.execute(USER_TYPES_DDL)
        conn.execute("CREATE EXTENSION IF NOT EXISTS citext")

        def described(name: str) -> object:
            oid = conn.execute("SELECT %s::regtype::oid", (name,)).fetchone()
            assert oid is not None
            return catalog.describe_type(int(str(oid[0])))

        assert described("mood") == EnumType(int(_oid(conn, "mood")), "public", "mood")
        domain = described("nested_posint")
        assert isinstance(domain, DomainType)
        assert domain.base_oid == _oid(conn, "posint")
        array = described("mood[]")
        assert isinstance(array, ArrayType)
        assert array.element_oid == _oid(conn, "mood")
        assert array.name == "_mood"
        assert array.delimiter == ","
        boxes = described("boxd[]")
        assert isinstance(boxes, ArrayType)
        assert boxes.delimiter == ";"
        record = described("dropped_field")
        assert isinstance(record, CompositeType)
        assert [(f.name, f.type_oid) for f in record.fields] == [("a", 23), ("c", 25)]
        assert described("citext") == OpaqueType(_oid(conn, "citext"), "public", "citext", "b")
        # int2vector has a typelem but is no array_send type.
        assert isinstance(described("int2vector"), OpaqueType)
        assert catalog.describe_type(4_000_000_000) is None


def _oid(conn: Conn, name: str) -> int:
    row = conn.execute("SELECT %s::regtype::oid", (name,)).fetchone()
    assert row is not None
    return int(str(row[0]))


def test_a_type_without_a_known_binary_layout_is_named_with_its_container(dsn: str) -> None:
    with connect(dsn) as conn, PostgresCatalog(dsn) as catalog:
        conn.execute(
            "CREATE EXTENSION IF NOT EXISTS citext;"
            "CREATE TYPE tagged AS (id int, tag citext);"
            "CREATE DOMAIN proc AS regproc"
        )
        forms = UserTypeForms(catalog.describe_type)
        for type_name, culprit in (
            ("citext", "public.citext"),
            ("tagged[]", "public.citext"),
            ("proc", "pg_catalog.regproc"),
            ("regproc[]", "pg_catalog.regproc"),
            ("regclass", "pg_catalog.regclass"),
        ):
            # The reader fails on any bytes: the type is known unreadable up front.
            with pytest.raises(UnknownBinaryFormatError) as caught:
                forms.reader(_oid(conn, type_name))(b"")
            assert culprit in str(caught.value), type_name
            assert "binary: false" in str(caught.value)


# --- random binary values, read by the server -----------------------------------------------


@pytest.fixture(scope="module")
def param_conn(pg18: LocalPostgres) -> Iterator[Conn]:
    with psycopg.connect(pg18.dsn(), autocommit=True) as conn:
        conn.execute(DEFAULT_OUTPUT)
        yield conn


def server_text(conn: Conn, type_oid: int, binary: bytes) -> str | None:
    """The server's text form of a binary value; None when the server rejects the bytes."""
    result = conn.pgconn.exec_params(
        b"SELECT $1", [binary], [type_oid], param_formats=[1], result_format=0
    )
    if result.status != psycopg.pq.ExecStatus.TUPLES_OK:
        return None
    value = result.get_value(0, 0)
    assert value is not None
    return bytes(value).decode()


def assert_reads_like_server(conn: Conn, type_name: str, binary: bytes) -> None:
    oid = psycopg.postgres.types[type_name].oid
    expected = server_text(conn, oid, binary)
    assume(expected is not None)
    reader = builtin_text_reader(oid)
    assert reader is not None
    assert reader(binary) == expected, binary.hex()


RANDOM = settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@RANDOM
@given(bits=st.integers(0, 2**32 - 1))
def test_every_float4_bit_pattern_prints_as_float4out(param_conn: Conn, bits: int) -> None:
    assert_reads_like_server(param_conn, "float4", struct.pack(">I", bits))


@RANDOM
@given(bits=st.integers(0, 2**64 - 1))
def test_every_float8_bit_pattern_prints_as_float8out(param_conn: Conn, bits: int) -> None:
    assert_reads_like_server(param_conn, "float8", struct.pack(">Q", bits))


@RANDOM
@given(days=st.integers(-2_451_545, 2_147_483_647 - 2_451_545))
def test_dates_print_as_date_out(param_conn: Conn, days: int) -> None:
    assert_reads_like_server(param_conn, "date", struct.pack(">i", days))


@RANDOM
@given(micros=st.integers(-(2**63), 2**63 - 1), zone=st.booleans())
def test_timestamps_print_as_timestamp_out(param_conn: Conn, micros: int, zone: bool) -> None:
    assert_reads_like_server(
        param_conn, "timestamptz" if zone else "timestamp", struct.pack(">q", micros)
    )


@RANDOM
@given(
    value=st.decimals(allow_nan=True, allow_infinity=True, places=None).filter(
        lambda d: not d.is_snan() and (not d.is_finite() or abs(d.adjusted()) < 200)
    )
)
def test_numerics_print_as_numeric_out(param_conn: Conn, value: Decimal) -> None:
    assert_reads_like_server(param_conn, "numeric", bytes(DecimalBinaryDumper(Decimal).dump(value)))


@RANDOM
@given(
    family=st.sampled_from([2, 3]),
    cidr=st.booleans(),
    bits=st.integers(0, 128),
    words=st.lists(st.sampled_from([0, 0, 0, 1, 0xFFFF, 0x1234]), min_size=8, max_size=8),
)
def test_network_addresses_print_as_inet_out(
    param_conn: Conn, family: int, cidr: bool, bits: int, words: list[int]
) -> None:
    address = struct.pack(">8H", *words)[: 4 if family == 2 else 16]
    bits = min(bits, 8 * len(address))
    data = bytes([family, bits, int(cidr), len(address)]) + address
    assert_reads_like_server(param_conn, "cidr" if cidr else "inet", data)


@RANDOM
@given(
    micros=st.integers(-(2**63), 2**63 - 1),
    days=st.integers(-(2**31), 2**31 - 1),
    months=st.integers(-(2**31), 2**31 - 1),
)
def test_intervals_print_as_interval_out(
    param_conn: Conn, micros: int, days: int, months: int
) -> None:
    assert_reads_like_server(param_conn, "interval", struct.pack(">qii", micros, days, months))
