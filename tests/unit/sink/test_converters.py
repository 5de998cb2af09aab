"""The per-column converters of the planner are ``convert_value``, only faster.

``column_converter`` resolves, once per relation, a function per column and protocol
format; ``plan_batch(generic_values=True)`` keeps converting every value through
``convert_value``. The properties below hold them to the same results: the same value
of the same type, or the same exception class, for PostgreSQL's text and binary forms of
every type with a specialised converter (and for bytes PostgreSQL never sends), and the
same plans, errors and Arrow source tables for whole batches with NULL and
unchanged-TOAST columns, whether the tuples arrive split or as wire bytes.
"""

from __future__ import annotations

import datetime as dt
import math
import pickle
import struct
from collections.abc import Callable
from dataclasses import FrozenInstanceError
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.types.numeric import DecimalBinaryDumper

from decoder import (
    ColumnKind,
    ColumnValue,
    Lsn,
    MalformedMessageError,
    RowChange,
    TupleData,
    ValueDecoder,
    datetime_to_pg_timestamp,
)
from sink import Batch, SinkDataError
from sink.constants import ColumnTypeOverride
from sink.engine.arrow import commit_time_array as _commit_time_array
from sink.engine.arrow import source_table
from sink.planning.fold import _new_planned_row, plan_batch
from sink.planning.plan import BatchPlan, MergeStep, PlannedRow
from sink.values.convert import column_converter, convert_value
from sink.values.typemap import PlanColumn, ValueForm, delta_type
from tests.support.pg_text_forms import (
    NUMERIC_5_0,
    NUMERIC_10_2,
    TYPED,
    TYPED_FULL,
    as_wire,
    doubles,
    instants,
    ints,
    ipc_bytes,
    numeric_text,
    numerics,
    timestamptz_text,
    typed_batches,
)
from tests.support.pg_text_forms import float_text as _float_text
from tests.support.pg_text_forms import wall as _wall
from tests.support.pgoutput_builder import encode_tuple
from tests.support.settings import metadata_columns
from tests.support.sink_changes import U, Value, batch, insert, tup, update

PG_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
PG_DATE_EPOCH = dt.date(2000, 1, 1)
DECODER = ValueDecoder()
META = metadata_columns()
Sent = tuple[ColumnKind, bytes]


def column(
    type_oid: int, typmod: int = -1, override: ColumnTypeOverride | None = None
) -> PlanColumn:
    return PlanColumn("c", type_oid, typmod, delta_type(type_oid, typmod, override))


# --- PostgreSQL's text and binary forms, by type -----------------------------------------

TEXT, BINARY = ColumnKind.TEXT, ColumnKind.BINARY
small_ints = st.integers(-(2**15), 2**15 - 1)
big_ints = st.integers(-(2**63), 2**63 - 1)
singles = st.floats(allow_nan=True, allow_infinity=True, width=32)
wall_clocks = st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31))


def _pg_micros(value: dt.datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return (value - PG_EPOCH) // dt.timedelta(microseconds=1)


def _numeric_binary(value: Decimal) -> bytes:
    return bytes(DecimalBinaryDumper(Decimal).dump(value))


def _int_array_binary(items: list[int | None], element_oid: int = 23) -> bytes:
    """array_send of a one-dimensional int4[]: ndim, has-null, element OID, dimension."""
    out = [
        struct.pack(">iiI", 1, int(None in items), element_oid),
        struct.pack(">ii", len(items), 1),
    ]
    for item in items:
        out.append(struct.pack(">i", -1) if item is None else struct.pack(">ii", 4, item))
    return b"".join(out)


def _int_array_text(items: list[int | None]) -> bytes:
    return ("{" + ",".join("NULL" if i is None else str(i) for i in items) + "}").encode()


# (column, strategy of sent values) for every type the planner converts without
# ``convert_value``, plus text-kept types whose binary values still go through it.
CASES: dict[str, tuple[PlanColumn, st.SearchStrategy[Sent]]] = {
    "bool": (
        column(16),
        st.sampled_from([(TEXT, b"t"), (TEXT, b"f"), (BINARY, b"\x01"), (BINARY, b"\x00")]),
    ),
    "bytea": (
        column(17),
        st.binary(max_size=40).flatmap(
            lambda b: st.sampled_from([(TEXT, b"\\x" + b.hex().encode()), (BINARY, b)])
        ),
    ),
    "int2": (
        column(21),
        small_ints.flatmap(
            lambda n: st.sampled_from([(TEXT, str(n).encode()), (BINARY, struct.pack(">h", n))])
        ),
    ),
    "int4": (
        column(23),
        ints.flatmap(
            lambda n: st.sampled_from([(TEXT, str(n).encode()), (BINARY, struct.pack(">i", n))])
        ),
    ),
    "int8": (
        column(20),
        big_ints.flatmap(
            lambda n: st.sampled_from([(TEXT, str(n).encode()), (BINARY, struct.pack(">q", n))])
        ),
    ),
    "oid": (
        column(26),
        st.integers(0, 2**32 - 1).flatmap(
            lambda n: st.sampled_from([(TEXT, str(n).encode()), (BINARY, struct.pack(">I", n))])
        ),
    ),
    "float4": (
        column(700),
        singles.flatmap(
            lambda f: st.sampled_from([(TEXT, _float_text(f)), (BINARY, struct.pack(">f", f))])
        ),
    ),
    "float8": (
        column(701),
        doubles.flatmap(
            lambda f: st.sampled_from([(TEXT, _float_text(f)), (BINARY, struct.pack(">d", f))])
        ),
    ),
    "date": (
        column(1082),
        st.dates().flatmap(
            lambda d: st.sampled_from(
                [
                    (TEXT, d.isoformat().zfill(10).encode()),
                    (BINARY, struct.pack(">i", (d - PG_DATE_EPOCH).days)),
                    (TEXT, b"infinity"),
                ]
            )
        ),
    ),
    "timestamp": (
        column(1114),
        wall_clocks.flatmap(
            lambda t: st.sampled_from(
                [(TEXT, _wall(t).encode()), (BINARY, struct.pack(">q", _pg_micros(t)))]
            )
        ),
    ),
    "timestamptz": (
        column(1184),
        st.one_of(
            timestamptz_text().map(lambda text: (TEXT, text)),
            instants.map(lambda t: (BINARY, struct.pack(">q", _pg_micros(t)))),
            st.just((TEXT, b"-infinity")),
        ),
    ),
    "numeric(10,2)": (
        column(1700, NUMERIC_10_2),
        numerics(10, 2).flatmap(
            lambda d: st.sampled_from([(TEXT, numeric_text(d)), (BINARY, _numeric_binary(d))])
        ),
    ),
    "numeric(5,0)": (
        column(1700, NUMERIC_5_0),
        numerics(5, 0).flatmap(
            lambda d: st.sampled_from([(TEXT, numeric_text(d)), (BINARY, _numeric_binary(d))])
        ),
    ),
    "numeric": (
        column(1700),
        numerics(20, 4).flatmap(
            lambda d: st.sampled_from([(TEXT, numeric_text(d)), (BINARY, _numeric_binary(d))])
        ),
    ),
    "numeric as double": (
        column(1700, NUMERIC_10_2, "double"),
        st.one_of(
            numerics(10, 2).flatmap(
                lambda d: st.sampled_from([(TEXT, numeric_text(d)), (BINARY, _numeric_binary(d))])
            ),
            st.sampled_from([(TEXT, b"NaN"), (TEXT, b"Infinity"), (TEXT, b"-Infinity")]),
        ),
    ),
    **{
        name: (
            column(type_oid),
            st.text()
            .map(lambda s: s.encode())
            .flatmap(lambda b: st.sampled_from([(TEXT, b), (BINARY, b)])),
        )
        for name, type_oid in (("text", 25), ("varchar", 1043), ("bpchar", 1042), ("name", 19))
    },
    "int4[]": (
        column(1007),
        st.lists(st.one_of(st.none(), ints), max_size=5).flatmap(
            lambda items: st.sampled_from(
                [
                    (TEXT, _int_array_text(items)),
                    (BINARY, _int_array_binary(items)),
                    (TEXT, b"{{1,2},{3,4}}"),
                ]
            )
        ),
    ),
    "uuid": (
        column(2950),
        st.uuids().flatmap(lambda u: st.sampled_from([(TEXT, str(u).encode()), (BINARY, u.bytes)])),
    ),
    "time": (
        column(1083),
        st.integers(0, 86_400_000_000).flatmap(
            lambda us: st.sampled_from(
                [
                    (BINARY, struct.pack(">q", us)),
                    (TEXT, f"{us // 3_600_000_000:02d}:00:00".encode()),
                ]
            )
        ),
    ),
    "jsonb": (
        column(3802),
        st.sampled_from(
            [(TEXT, b'{"a": 1}'), (BINARY, b'\x01{"a": 1}'), (BINARY, b'\x02{"a": 1}')]
        ),
    ),
    "enum": (column(987_654), st.sampled_from([(TEXT, b"happy"), (BINARY, b"happy")])),
}


def outcome(convert: Callable[[], object]) -> tuple[str, str, str]:
    """What a conversion gives: its value's type and repr, or its exception class."""
    try:
        value = convert()
    except Exception as exc:
        return ("error", type(exc).__module__, type(exc).__qualname__)
    return ("value", type(value).__qualname__, repr(value))


def assert_same_conversion(plan_column: PlanColumn, kind: ColumnKind, data: bytes) -> None:
    fast = column_converter(plan_column, kind, DECODER)
    expected = outcome(lambda: convert_value(plan_column, kind, data, DECODER))
    assert outcome(lambda: fast(data)) == expected, (plan_column, kind, data)


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_fast_converters_give_what_convert_value_gives(name: str, data: st.DataObject) -> None:
    plan_column, sent = CASES[name]
    kind, raw = data.draw(sent)
    assert_same_conversion(plan_column, kind, raw)


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=60, deadline=None)
@given(raw=st.binary(max_size=24), binary=st.booleans())
def test_fast_converters_fail_like_convert_value_on_bytes_postgresql_never_sends(
    name: str, raw: bytes, binary: bool
) -> None:
    plan_column, _ = CASES[name]
    assert_same_conversion(plan_column, BINARY if binary else TEXT, raw)


def test_the_cases_cover_every_form_and_the_specialised_types() -> None:
    forms = {plan_column.delta.form for plan_column, _ in CASES.values()}
    assert forms == set(ValueForm)
    covered = {plan_column.type_oid for plan_column, _ in CASES.values()}
    assert {16, 17, 19, 20, 21, 23, 25, 26, 700, 701, 1042, 1043, 1082, 1114, 1184, 1700} <= covered


def test_special_values_convert_alike() -> None:
    for value in (math.nan, math.inf, -math.inf, -0.0):
        for type_oid, layout in ((700, ">f"), (701, ">d")):
            assert_same_conversion(column(type_oid), TEXT, _float_text(value))
            assert_same_conversion(column(type_oid), BINARY, struct.pack(layout, value))
    for special in ("NaN", "Infinity", "-Infinity", "-12345678.99", "123456789012.5"):
        number = Decimal(special)
        for plan_column in (column(1700, NUMERIC_10_2), column(1700)):
            assert_same_conversion(plan_column, TEXT, numeric_text(number))
            assert_same_conversion(plan_column, BINARY, _numeric_binary(number))


# --- whole batches: NULL, unchanged TOAST, errors, wire and split tuples ------------------


def planned(changes_batch: Batch, *, generic: bool) -> tuple[str, object]:
    """The plan and its Arrow source tables, or the error (message and cause class)."""
    try:
        plan = plan_batch(changes_batch, generic_values=generic)
        return ("plan", (plan, _arrow(plan)))
    except SinkDataError as exc:
        return ("error", (str(exc), type(exc.__cause__)))


def _arrow(plan: BatchPlan) -> list[pa.Table] | tuple[str, type[BaseException] | None]:
    tables = []
    for table in plan.tables:
        for step in table.steps:
            if isinstance(step, MergeStep):
                try:
                    tables.append(source_table(table.qualified_name, step, META)[1])
                except SinkDataError as exc:
                    return (str(exc), type(exc.__cause__))
    return tables


def assert_same_plans(changes_batch: Batch, *, wire_too: bool = True) -> None:
    expected = planned(changes_batch, generic=True)
    candidates = (changes_batch, as_wire(changes_batch)) if wire_too else (changes_batch,)
    for candidate in candidates:
        got = planned(candidate, generic=False)
        assert got[0] == expected[0]
        if got[0] == "error":
            assert got == expected
            continue
        (plan, tables), (expected_plan, expected_tables) = got[1], expected[1]  # type: ignore[misc]
        assert _nan_safe(plan) == _nan_safe(expected_plan)
        if isinstance(tables, tuple):
            assert tables == expected_tables
        else:
            assert [ipc_bytes(t) for t in tables] == [ipc_bytes(t) for t in expected_tables]


def _nan_safe(plan: BatchPlan) -> str:
    # NaN != NaN, so compare the plans by their repr (NaN prints alike).
    return repr(plan)


@settings(max_examples=300, deadline=None)
@given(changes_batch=typed_batches())
def test_fast_plans_equal_generic_plans_with_nulls_toast_and_bad_values(
    changes_batch: Batch,
) -> None:
    assert_same_plans(changes_batch)


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 3),
            st.one_of(
                st.none(), st.just(U), numerics(5, 0).map(lambda d: numeric_text(d).decode())
            ),
            st.one_of(st.none(), st.just(U), st.text(max_size=4)),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_full_identity_plans_equal_generic_plans(rows: list[tuple[int, Value, Value]]) -> None:
    changes = []
    for ordinal, (key, amount, note) in enumerate(rows):
        old = [str(key), "1", "x"]
        changes.append(
            update(
                TYPED_FULL, str(key), amount, note, lsn=20, ordinal=ordinal, old=old, old_kind="O"
            )
        )
    assert_same_plans(batch(*changes))


def test_numeric_beyond_the_decimal_precision_fails_alike_when_arrow_is_built() -> None:
    changes_batch = batch(insert(TYPED, "1", "2", "123456789012.5", None, "n", "1", lsn=10))
    expected = planned(changes_batch, generic=True)
    assert expected[0] == "plan"
    _, tables = expected[1]  # type: ignore[misc]
    assert isinstance(tables, tuple)
    assert "cannot build DECIMAL(10,2) values for column 'amount'" in tables[0]
    assert_same_plans(changes_batch)


def test_a_tuple_with_another_column_count_fails_alike_split_or_wire() -> None:
    short = RowChange(
        op="insert",
        relation=TYPED,
        new=tup(["1", "2"]),
        old=None,
        old_kind=None,
        commit_lsn=Lsn(10),
        commit_time=datetime_to_pg_timestamp(PG_EPOCH),
        ordinal=0,
    )
    assert_same_plans(batch(short))
    with pytest.raises(SinkDataError, match="has 2 columns but its relation has 6"):
        plan_batch(as_wire(batch(short)))


def test_a_damaged_wire_tuple_fails_as_the_split_path_does() -> None:
    good = encode_tuple(tup(["1", "2", "3.5", None, "n", "1"]))
    damaged = TupleData.from_wire(good[:-3], 0)
    change = RowChange(
        op="insert",
        relation=TYPED,
        new=damaged,
        old=None,
        old_kind=None,
        commit_lsn=Lsn(10),
        commit_time=datetime_to_pg_timestamp(PG_EPOCH),
        ordinal=0,
    )
    with pytest.raises(MalformedMessageError) as generic:
        plan_batch(batch(change), generic_values=True)
    damaged_again = TupleData.from_wire(good[:-3], 0)
    with pytest.raises(MalformedMessageError) as fast:
        plan_batch(
            batch(
                RowChange(
                    op="insert",
                    relation=TYPED,
                    new=damaged_again,
                    old=None,
                    old_kind=None,
                    commit_lsn=Lsn(10),
                    commit_time=datetime_to_pg_timestamp(PG_EPOCH),
                    ordinal=0,
                )
            )
        )
    assert str(fast.value) == str(generic.value)


def test_a_text_column_value_without_bytes_fails_as_the_generic_path_does() -> None:
    broken = TupleData((ColumnValue(ColumnKind.TEXT, b"1"), *[ColumnValue(ColumnKind.TEXT)] * 5))
    change = RowChange(
        op="insert",
        relation=TYPED,
        new=broken,
        old=None,
        old_kind=None,
        commit_lsn=Lsn(10),
        commit_time=datetime_to_pg_timestamp(PG_EPOCH),
        ordinal=0,
    )
    # The decoder never makes such a column; a wire tuple cannot even hold one.
    assert_same_plans(batch(change), wire_too=False)


# --- building blocks ------------------------------------------------------------------------


def test_planned_rows_built_through_their_slots_are_genuine_planned_rows() -> None:
    at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    fields = (False, (1, "a"), frozenset({1}), (7,), Lsn(5), at, 3)
    built = _new_planned_row(*fields)
    made = PlannedRow(*fields)
    assert type(built) is PlannedRow
    assert built == made
    assert hash(built) == hash(made)
    assert repr(built) == repr(made)
    assert pickle.loads(pickle.dumps(built)) == made
    with pytest.raises(FrozenInstanceError):
        built.delete = True  # type: ignore[misc]


aware = st.datetimes(timezones=st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=5))]))


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.none(), aware, st.datetimes()).flatmap(
            lambda v: st.lists(st.just(v), min_size=1, max_size=3)
        ),
        max_size=6,
    ).map(lambda runs: [v for run in runs for v in run])
)
def test_commit_times_as_integers_build_the_same_arrow_array(
    values: list[dt.datetime | None],
) -> None:
    arrow = pa.timestamp("us", tz="UTC")
    expected = outcome(lambda: pa.array(values, type=arrow))
    got = outcome(lambda: _commit_time_array(values, arrow))
    assert got[0] == expected[0]
    if expected[0] == "error":
        assert got == expected
    else:
        built = pa.table({"t": _commit_time_array(values, arrow)})
        assert ipc_bytes(built) == ipc_bytes(pa.table({"t": pa.array(values, type=arrow)}))
