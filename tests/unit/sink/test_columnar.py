"""The columnar planner builds the MERGE source the row planner builds, value for value.

``plan_batch(columnar=True)`` (what the sink runs) holds inserts and identity-keeping
updates of keyed tables as Arrow columns (``sink.columnar``); the row planner
(``columnar=False``) is the reference. For the same batch both give the same Arrow source
per merge step (rows sorted by identity: a MERGE source has no order), the same counts and
the same errors - on generated batches with NULLs, unchanged TOAST, key changes, deletes
and values the converters refuse, and on the text forms of every Delta type, edges
included. The kernel's ``pick`` and ``gather`` are pinned on golden and damaged parts.

``fold`` in ``sink/planning/_columnar.pyi`` (the C function's types) and ``fold_text_rows`` in
``sink/planning/kernel.py`` (its documented wrapper) are deliberate twins with one parameter list,
which ``duplicates`` reports as a pair.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoder import (
    PURE_PYTHON_ENV,
    MessageChange,
    RowChange,
    TruncateChange,
    TupleData,
)
from sink import Batch, SinkDataError
from sink.engine.arrow import source_table
from sink.planning import kernel
from sink.planning.fold import plan_batch
from sink.planning.kernel import fold_text_rows, gather_text_columns, pick_text_values
from sink.planning.partitioning import bucket_of, bucket_values
from sink.planning.plan import BatchPlan, KeylessStep, MergeStep
from tests.support.pg_text_forms import (
    TEXT_FORM_CASES,
    TYPED,
    as_wire,
    doubles,
    float_text,
    ints,
    ipc_bytes,
    timestamptz_text,
    typed_batches,
)
from tests.support.pgoutput_builder import encode_tuple
from tests.support.settings import metadata_columns
from tests.support.sink_changes import (
    INT8,
    U,
    Value,
    batch,
    col,
    delete,
    insert,
    message,
    rel,
    truncate,
    tup,
    update,
)

META = metadata_columns()


def _sources(changes: Batch, *, columnar: bool) -> tuple[str, object]:
    """Per table: counts and each merge step's source sorted by identity; or the error."""
    try:
        plan = plan_batch(changes, columnar=columnar)
        out = []
        for table in plan.tables:
            steps = []
            for step in table.steps:
                if isinstance(step, MergeStep):
                    _, arrow = source_table(table.qualified_name, step, META)
                    keys = [(c.name, "ascending") for c in step.match_columns]
                    steps.append(ipc_bytes(arrow.sort_by(keys)))
            out.append((table.qualified_name, dict(table.counts), steps))
        return ("plan", out)
    except SinkDataError as exc:
        return ("error", (str(exc), type(exc.__cause__)))


def assert_columnar_equals_rows(changes: Batch) -> None:
    assert _sources(changes, columnar=True) == _sources(changes, columnar=False)


def _columnar_rows(changes: Batch) -> int:
    plan = plan_batch(changes, columnar=True)
    return sum(
        len(step.columnar)
        for table in plan.tables
        for step in table.steps
        if isinstance(step, MergeStep) and step.columnar is not None
    )


@settings(max_examples=300, deadline=None)
@given(changes=typed_batches())
def test_columnar_sources_equal_row_sources(changes: Batch) -> None:
    assert_columnar_equals_rows(as_wire(changes))


_GOOD_VALUES: list[st.SearchStrategy[Value]] = [
    ints.map(str),
    st.integers(-(10**10) + 1, 10**10 - 1).map(lambda u: format(Decimal(u).scaleb(-2), "f")),
    timestamptz_text().map(bytes.decode),
    st.text(max_size=8),
    doubles.map(lambda f: float_text(f).decode()),
]


@st.composite
def mostly_clean_batches(draw: st.DrawFn) -> Batch:
    """TYPED changes over a few keys: values valid but for a rare one, some NULL or TOAST."""
    changes: list[RowChange] = []
    for ordinal in range(draw(st.integers(1, 12))):
        lsn = 10 + ordinal // 4
        values: list[Value] = [str(draw(st.integers(0, 4)))]
        for good in _GOOD_VALUES:
            roll = draw(st.integers(0, 199))  # 1 in 200 values is one no reader accepts
            values.append(
                draw(good)
                if roll < 160
                else None
                if roll < 180
                else U
                if roll < 199
                else "not a value"
            )
        op = draw(st.sampled_from(["insert", "insert", "update", "update", "delete"]))
        if op == "insert":
            changes.append(insert(TYPED, *values, lsn=lsn, ordinal=ordinal))
        elif op == "update":
            moved = draw(st.booleans()) and draw(st.booleans())
            old = [str(draw(st.integers(0, 4)))] + [None] * 5 if moved else None
            changes.append(
                update(
                    TYPED, *values, lsn=lsn, ordinal=ordinal, old=old, old_kind="K" if old else None
                )
            )
        else:
            changes.append(delete(TYPED, values[0], *[None] * 5, lsn=lsn, ordinal=ordinal))
    return batch(*changes)


@settings(max_examples=400, deadline=None)
@given(changes=mostly_clean_batches())
def test_columnar_sources_equal_row_sources_on_mostly_clean_batches(changes: Batch) -> None:
    assert_columnar_equals_rows(as_wire(changes))


@pytest.mark.parametrize(("type_oid", "modifier", "texts"), TEXT_FORM_CASES)
def test_every_delta_type_reads_alike_columnar_or_row_by_row(
    type_oid: int, modifier: int, texts: list[str | None]
) -> None:
    relation = rel("public.t", col("id", 20, key=True), col("c", type_oid, typmod=modifier))
    for text in texts:
        # One value per batch, so a refused value cannot hide another column's fallback.
        changes = as_wire(batch(insert(relation, "1", text, lsn=10)))
        assert_columnar_equals_rows(changes)
    many = as_wire(
        batch(*[insert(relation, str(i), text, lsn=10, ordinal=i) for i, text in enumerate(texts)])
    )
    assert_columnar_equals_rows(many)


def test_plain_inserts_and_updates_take_the_columnar_path() -> None:
    relation = rel("public.t", col("id", 20, key=True), col("n", 23), col("note"))
    changes = as_wire(
        batch(
            insert(relation, "1", "10", "a", lsn=10, ordinal=0),
            insert(relation, "2", None, "b", lsn=10, ordinal=1),
            update(relation, "1", "11", "c", lsn=11, ordinal=0),
            insert(relation, "3", "30", None, lsn=11, ordinal=1),
            delete(relation, "3", None, None, lsn=12, ordinal=0),
        )
    )
    assert _columnar_rows(changes) == 2  # ids 1 and 2; 3 was deleted, a row-path row
    (table,) = plan_batch(changes, columnar=True).tables
    (step,) = table.steps
    assert isinstance(step, MergeStep)
    assert [row.delete for row in step.rows] == [True]
    assert step.row_count == 3
    assert_columnar_equals_rows(changes)


def test_unchanged_toast_after_a_columnar_insert_is_filled_from_it() -> None:
    relation = rel("public.t", col("id", 20, key=True), col("n", 23), col("doc"))
    changes = as_wire(
        batch(
            insert(relation, "1", "10", "long text", lsn=10, ordinal=0),
            update(relation, "1", "11", U, lsn=11, ordinal=0),
        )
    )
    (table,) = plan_batch(changes, columnar=True).tables
    (step,) = table.steps
    assert isinstance(step, MergeStep)
    assert step.columnar is None
    (row,) = step.rows
    assert row.values == (1, 11, "long text")
    assert row.keep == frozenset()
    assert_columnar_equals_rows(changes)


def test_binary_tuples_and_history_tables_stay_on_the_row_path() -> None:
    relation = rel("public.t", col("id", 20, key=True), col("note"))
    binary = RowChange(
        op="insert",
        relation=relation,
        new=TupleData.from_wire(
            b"??" + encode_tuple(tup([struct.pack(">q", 7), b"x"], binary=True)), 2
        ),
        old=None,
        old_kind=None,
        commit_lsn=insert(relation, "1", "x", lsn=10).commit_lsn,
        commit_time=0,
        ordinal=0,
    )
    assert _columnar_rows(batch(binary)) == 0
    assert_columnar_equals_rows(batch(binary))
    text = as_wire(batch(insert(relation, "1", "x", lsn=10)))
    assert _columnar_rows(text) == 1
    plan = plan_batch(text, columnar=True, history=True)
    (step,) = plan.tables[0].steps
    assert isinstance(step, MergeStep)
    assert step.columnar is None
    assert len(step.rows) == 1


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        (b"\xff\xfe", UnicodeDecodeError),  # not UTF-8
        (b"12.5", None),  # fine: the control
    ],
)
def test_a_value_the_converter_refuses_raises_the_row_paths_error(
    text: bytes, cause: type[BaseException] | None
) -> None:
    relation = rel("public.t", col("id", 20, key=True), col("note"))
    changes = as_wire(batch(insert(relation, "1", text, lsn=10)))
    got = _sources(changes, columnar=True)
    assert got == _sources(changes, columnar=False)
    if cause is None:
        assert got[0] == "plan"
    else:
        assert got[0] == "error"
        message, chained = got[1]  # type: ignore[misc]
        assert chained is cause
        assert "column 'note' of public.t" in message


# --- the kernel's two functions ------------------------------------------------------------


def _part(*values: object) -> tuple[bytes, int]:
    return b"??" + encode_tuple(tup(list(values))), 2  # type: ignore[arg-type]


def test_pick_converts_only_the_columns_asked_for() -> None:
    calls: list[bytes] = []

    def counting(data: bytes) -> object:
        calls.append(data)
        return int(data)

    def refuse(data: bytes) -> object:
        raise AssertionError("not a key column")

    buf, start = _part("12", "x", None, "7")
    assert pick_text_values(buf, start, (3, 0), [counting, refuse, refuse, counting]) == (7, 12)
    assert calls == [b"7", b"12"]
    assert pick_text_values(buf, start, (2,), [refuse] * 4) == (None,)


@pytest.mark.parametrize(
    "damage",
    [
        "unchanged",
        "binary",
        "count",
        "short",
        "index",
        "raises",
    ],
)
def test_pick_answers_none_for_anything_but_text_and_nulls(damage: str) -> None:
    loaders = [int, bytes.decode]
    buf, start = _part("1", "x")
    indexes: tuple[int, ...] = (0,)
    if damage == "unchanged":
        buf, start = _part("1", U)
    elif damage == "binary":
        buf = b"??" + encode_tuple(tup([struct.pack(">q", 1), b"x"], binary=True))
    elif damage == "count":
        loaders = [int, bytes.decode, bytes.decode]
    elif damage == "short":
        buf = buf[:-1]
    elif damage == "index":
        indexes = (2,)
    else:
        buf, start = _part("one", "x")
    assert pick_text_values(buf, start, indexes, loaders) is None


def test_gather_lays_columns_out_as_arrow_binary_arrays() -> None:
    parts = [_part("1", "ab", None), _part("22", None, ""), _part("", "c", "d")]
    gathered = gather_text_columns(parts, 3)
    assert gathered is not None
    arrays = [
        pa.Array.from_buffers(
            pa.binary(),
            len(parts),
            [None if v is None else pa.py_buffer(v), pa.py_buffer(o), pa.py_buffer(d)],
            null_count=n,
        ).to_pylist()
        for o, d, v, n in gathered
    ]
    assert arrays == [[b"1", b"22", b""], [b"ab", None, b"c"], [None, b"", b"d"]]
    assert [n for *_, n in gathered] == [0, 1, 1]
    assert gathered[0][2] is None


def test_gather_answers_none_for_anything_but_text_and_nulls() -> None:
    good = _part("1", "x")
    assert gather_text_columns([good, _part("2", U)], 2) is None
    assert gather_text_columns([good], 3) is None
    assert gather_text_columns([good, (good[0][:-1], 2)], 2) is None
    assert gather_text_columns([good, [good[0], 2]], 2) is None  # type: ignore[list-item]
    assert gather_text_columns([], 2) is not None


_FOLD_REL = rel("public.f", col("id", INT8, key=True), col("v"))
_PLAIN = (int, str, type(None))


def _wired(change: RowChange) -> RowChange:
    return as_wire(batch(change)).changes[0]  # type: ignore[return-value]


def _fold(
    changes: list[RowChange | MessageChange], start: int = 0, rows: dict | None = None
) -> tuple[tuple[int, int, int, int, int], dict, list, list, list]:
    """Fold ``changes[start:]`` as a run of ``_FOLD_REL`` at the first change's commit time."""
    rows = {} if rows is None else rows
    folded: list[RowChange] = []
    parts: list[tuple[bytes, int]] = []
    deletes: list[bool] = []
    timestamp = changes[0].commit_time
    assert timestamp is not None
    answer = fold_text_rows(
        changes,
        start,
        _FOLD_REL,
        timestamp,
        (0,),
        (int, bytes.decode),
        _PLAIN,
        rows,
        folded,
        parts,
        deletes,
    )
    return answer, rows, folded, parts, deletes


def test_fold_folds_a_run_of_plain_changes_as_the_row_path_does() -> None:
    changes: list[RowChange | MessageChange] = [
        _wired(insert(_FOLD_REL, "1", "a", lsn=10)),
        _wired(insert(_FOLD_REL, "2", "b", lsn=10, ordinal=1)),
        _wired(update(_FOLD_REL, "1", "c", lsn=10, ordinal=2)),
        _wired(insert(_FOLD_REL, "2", None, lsn=10, ordinal=3)),
        _wired(insert(_FOLD_REL, None, "n", lsn=10, ordinal=4)),
        _wired(delete(_FOLD_REL, "1", None, lsn=10, ordinal=5)),
        _wired(delete(_FOLD_REL, "9", "full", lsn=10, ordinal=6, old_kind="O")),
    ]
    (stop, inserts, updates, deletes, first_touches), rows, folded, parts, flags = _fold(changes)
    assert (stop, inserts, updates, deletes) == (7, 4, 1, 2)
    # The delete of 9 is its identity's first change in the step; the others follow inserts.
    assert first_touches == 1
    # An update moves its identity last; an insert or delete takes the identity's place.
    assert list(rows.items()) == [((2,), 3), ((1,), 5), ((None,), 4), ((9,), 6)]
    assert folded == changes
    tuples = [c.new or c.old for c in changes]  # type: ignore[union-attr]
    assert parts == [t.wire for t in tuples]  # a delete's old tuple
    assert flags == [False] * 5 + [True, True]


def test_fold_starts_where_it_is_told_and_replaces_what_the_row_path_planned() -> None:
    changes: list[RowChange | MessageChange] = [
        _wired(insert(_FOLD_REL, "1", "a", lsn=10)),
        _wired(update(_FOLD_REL, "7", "b", lsn=10, ordinal=1)),
    ]
    planned = {(7,): "a row the row path folded", (8,): "another"}
    (stop, inserts, updates, deletes, first_touches), rows, folded, _, _ = _fold(
        changes, 1, planned
    )
    # The update finds 7 planned already: not its identity's first change in the step.
    assert (stop, inserts, updates, deletes, first_touches) == (2, 0, 1, 0, 0)
    assert rows is planned
    assert list(rows.items()) == [((8,), "another"), ((7,), 0)]
    assert folded == [changes[1]]
    assert _fold(changes, 2, {})[0] == (2, 0, 0, 0, 0)
    # Alone, the update of 7 is the first change of its identity.
    assert _fold(changes, 1, {})[0] == (2, 0, 1, 0, 1)


@pytest.mark.parametrize(
    "ends_the_run",
    [
        "delete with a split old tuple",
        "update with an old tuple",
        "an equal relation, another object",
        "another commit time",
        "a message",
        "unchanged toast",
        "binary",
        "split tuple",
        "identity not plain",
        "identity the loader refuses",
    ],
)
def test_fold_stops_at_the_first_change_that_is_not_plain(ends_the_run: str) -> None:
    first = _wired(insert(_FOLD_REL, "1", "a", lsn=10))
    other: RowChange | MessageChange
    if ends_the_run == "delete with a split old tuple":
        other = delete(_FOLD_REL, "1", None, lsn=10, ordinal=1)  # values, no wire
    elif ends_the_run == "update with an old tuple":
        other = _wired(update(_FOLD_REL, "2", "b", lsn=10, ordinal=1, old=["1", None]))
    elif ends_the_run == "an equal relation, another object":
        twin = rel("public.f", col("id", INT8, key=True), col("v"))
        assert twin == _FOLD_REL
        other = _wired(insert(twin, "2", "b", lsn=10, ordinal=1))
    elif ends_the_run == "another commit time":
        other = _wired(insert(_FOLD_REL, "2", "b", lsn=11))
    elif ends_the_run == "a message":
        other = message(b"m", lsn=10, commit_lsn=10, ordinal=1)
    elif ends_the_run == "unchanged toast":
        other = _wired(update(_FOLD_REL, "2", U, lsn=10, ordinal=1))
    elif ends_the_run == "binary":
        change = insert(_FOLD_REL, "2", "b", lsn=10, ordinal=1)
        binary = tup([struct.pack(">q", 2), b"b"], binary=True)
        other = RowChange(**{**_fields(change), "new": _wire_of(binary)})
    elif ends_the_run == "split tuple":
        other = insert(_FOLD_REL, "2", "b", lsn=10, ordinal=1)  # values, no wire
    elif ends_the_run == "identity not plain":
        other = _wired(insert(_FOLD_REL, "2.5", "b", lsn=10, ordinal=1))
    else:
        other = _wired(insert(_FOLD_REL, "two", "b", lsn=10, ordinal=1))
    last = _wired(insert(_FOLD_REL, "3", "c", lsn=10, ordinal=2))
    changes = [first, other, last]
    rows = {}
    answer = fold_text_rows(
        changes,
        0,
        _FOLD_REL,
        first.commit_time,
        (0,),
        (_float_if_dotted, bytes.decode),
        _PLAIN,
        rows,
        [],
        [],
        [],
    )
    assert answer == (1, 1, 0, 0, 0)
    assert rows == {(1,): 0}


def _float_if_dotted(data: bytes) -> object:
    return float(data) if b"." in data else int(data)


def _fields(change: RowChange) -> dict[str, object]:
    return {name: getattr(change, name) for name in RowChange.__dataclass_fields__}


def _wire_of(data: TupleData) -> TupleData:
    return TupleData.from_wire(b"??" + encode_tuple(data), 2)


def test_fold_refuses_containers_it_cannot_fill() -> None:
    change = _wired(insert(_FOLD_REL, "1", "a", lsn=10))
    with pytest.raises(TypeError):
        fold_text_rows(
            [change],
            0,
            _FOLD_REL,
            change.commit_time,
            (0,),
            (int, bytes.decode),
            _PLAIN,
            {},
            (),  # type: ignore[arg-type]
            [],
            [],
        )


def test_a_bad_value_in_a_row_replaced_later_in_the_batch_is_still_an_error() -> None:
    # The row path converts every change's values as it folds; the columnar path converts
    # the replaced rows too, so whether a batch fails never depends on where it was cut.
    relation = rel("public.t", col("id", 20, key=True), col("at", 1184))
    changes = as_wire(
        batch(
            insert(relation, "1", "not a timestamp", lsn=10, ordinal=0),
            update(relation, "1", "2024-01-01 00:00:00+00", lsn=11, ordinal=0),
        )
    )
    got = _sources(changes, columnar=True)
    assert got == _sources(changes, columnar=False)
    assert got[0] == "error"
    assert "column 'at' of public.t" in got[1][0]  # type: ignore[index]


def test_a_value_under_its_convention_in_a_replaced_row_is_still_rejected() -> None:
    relation = rel("public.t", col("id", 20, key=True), col("at", 1184))
    changes = as_wire(
        batch(
            insert(relation, "1", "infinity", lsn=10, ordinal=0),
            update(relation, "1", "2024-01-01 00:00:00+00", lsn=11, ordinal=0),
        )
    )
    assert_columnar_equals_rows(changes)
    for columnar in (True, False):
        (table,) = plan_batch(changes, columnar=columnar).tables
        assert [(r.column, r.original, r.lsn) for r in table.rejects] == [("at", "infinity", 10)]


def test_a_step_of_binary_rows_stops_trying_the_columnar_path() -> None:
    relation = rel("public.t", col("id", 20, key=True), col("note"))
    binary = [
        RowChange(
            op="insert",
            relation=relation,
            new=TupleData.from_wire(
                b"??" + encode_tuple(tup([struct.pack(">q", key), b"x"], binary=True)), 2
            ),
            old=None,
            old_kind=None,
            commit_lsn=insert(relation, "1", "x", lsn=10).commit_lsn,
            commit_time=0,
            ordinal=key,
        )
        for key in range(100)
    ]
    text = as_wire(batch(insert(relation, "500", "y", lsn=10, ordinal=100))).changes
    changes = batch(*binary, *text)  # type: ignore[arg-type]
    assert _columnar_rows(changes) == 0
    assert_columnar_equals_rows(changes)


def test_key_buckets_of_columnar_rows_follow_the_source_row_order() -> None:
    relation = rel("public.t", col("id", 20, key=True), col("note"))
    changes = as_wire(
        batch(
            insert(relation, "250", "a", lsn=10, ordinal=0),
            insert(relation, "7", "b", lsn=10, ordinal=1),
            delete(relation, "130", None, lsn=10, ordinal=2),
        )
    )
    (table,) = plan_batch(changes, columnar=True).tables
    (step,) = table.steps
    assert isinstance(step, MergeStep)
    assert step.columnar is not None
    _, source = source_table(table.qualified_name, step, META)
    keys = source.column("id").to_pylist()
    assert bucket_values(step, 0, 100).to_pylist() == [bucket_of(key, 100) for key in keys]
    assert sorted(keys) == [7, 130, 250]


# The planner's loop folds a run of plain changes of one relation inline and hands every
# other change to ``add_row`` (``_Planner.add_changes``): batches that switch relation,
# re-send a relation, change a table's columns, truncate, carry messages, or change commit
# time mid-run must plan as the row planner plans them.
_A = rel("public.a", col("id", 20, key=True), col("n", 23), col("note"), relation_id=1)
_A_RESENT = rel("public.a", col("id", 20, key=True), col("n", 23), col("note"), relation_id=1)
_A_WIDER = rel(
    "public.a", col("id", 20, key=True), col("n", 23), col("note"), col("extra"), relation_id=1
)
_B = rel("public.b", col("id", 20, key=True), col("note"), relation_id=2)
_KEYLESS = rel("public.k", col("n", 23), col("note"), identity="f", relation_id=3)
_RELATIONS = (_A, _A_RESENT, _A_WIDER, _B, _KEYLESS)


def _wire_batch(changes: list[RowChange | TruncateChange | MessageChange]) -> Batch:
    """``as_wire`` for batches that also hold truncates and messages (passed through)."""
    wired: list[RowChange | TruncateChange | MessageChange] = []
    for change in changes:
        wired.extend(as_wire(batch(change)).changes if isinstance(change, RowChange) else [change])
    return batch(*wired)


@st.composite
def interleaved_changes(draw: st.DrawFn) -> list[RowChange | TruncateChange | MessageChange]:
    """Changes before wiring: each plan gets tuples of its own (``_wire_batch``), as the row
    path splits the tuples it reads and a split tuple never takes the columnar path."""
    changes: list[RowChange | TruncateChange | MessageChange] = []
    for ordinal in range(draw(st.integers(1, 40))):
        lsn = 10 + ordinal // draw(st.sampled_from([1, 5, 40]))
        kind = draw(st.sampled_from(["row"] * 12 + ["truncate", "message"]))
        if kind == "truncate":
            changes.append(truncate(draw(st.sampled_from([_A, _B])), lsn=lsn, ordinal=ordinal))
            continue
        if kind == "message":
            changes.append(message(b"m", lsn=lsn, commit_lsn=lsn, ordinal=ordinal))
            continue
        relation = draw(st.sampled_from(_RELATIONS))
        key = str(draw(st.integers(0, 5)))
        others: list[Value] = [
            draw(st.sampled_from(["1", "2", None, U]))
            if column.type_oid == 23
            else draw(st.sampled_from(["x", "y", None, U]))
            for column in relation.columns
        ]
        values = [key, *others[1:]] if relation is not _KEYLESS else others
        op = draw(st.sampled_from(["insert", "insert", "insert", "update", "update", "delete"]))
        if relation is _KEYLESS:
            full = [draw(st.sampled_from(["1", "2"])), "x"]
            values = [v if v is not U else "3" if i == 0 else "z" for i, v in enumerate(values)]
            if op == "insert":
                changes.append(insert(relation, *values, lsn=lsn, ordinal=ordinal))
            elif op == "update":
                changes.append(
                    update(relation, *values, lsn=lsn, ordinal=ordinal, old=full, old_kind="O")
                )
            else:
                changes.append(delete(relation, *full, lsn=lsn, ordinal=ordinal))
            continue
        if op == "insert":
            values = [
                v if v is not U else "3" if column.type_oid == 23 else "t"
                for v, column in zip(values, relation.columns, strict=True)
            ]
            if draw(st.integers(0, 99)) == 57:
                values[1] = "not an int"  # refused by the converter, whichever path plans it
            changes.append(insert(relation, *values, lsn=lsn, ordinal=ordinal))
        elif op == "update":
            moved = draw(st.integers(0, 5)) == 0
            old: list[Value] | None = (
                [str(draw(st.integers(0, 5)))] + [None] * (len(values) - 1) if moved else None
            )
            changes.append(
                update(
                    relation,
                    *values,
                    lsn=lsn,
                    ordinal=ordinal,
                    old=old,
                    old_kind="K" if old else None,
                )
            )
        else:
            changes.append(
                delete(relation, key, *[None] * (len(values) - 1), lsn=lsn, ordinal=ordinal)
            )
    return changes


def _steps(plan: BatchPlan) -> list[tuple[str, list[object]]]:
    """Per table, the kind of each step; a keyless step whole (it is never columnar)."""
    return [
        (
            table.qualified_name,
            [
                step if isinstance(step, KeylessStep) else type(step).__name__
                for step in table.steps
            ],
        )
        for table in plan.tables
    ]


@settings(max_examples=400, deadline=None)
@given(changes=interleaved_changes())
def test_interleaved_relations_truncates_and_messages_plan_as_the_row_path(
    changes: list[RowChange | TruncateChange | MessageChange],
) -> None:
    assert_columnar_equals_rows(_wire_batch(changes))
    try:
        columnar = plan_batch(_wire_batch(changes), columnar=True)
    except SinkDataError:
        return  # the same error both ways: assert_columnar_equals_rows compared them
    assert _steps(columnar) == _steps(plan_batch(_wire_batch(changes), columnar=False))


def test_a_run_of_plain_changes_folds_columnar_across_relation_switches() -> None:
    changes = _wire_batch(
        [
            insert(_A, "1", "1", "a", lsn=10, ordinal=0),
            insert(_A, "2", "1", "b", lsn=10, ordinal=1),
            insert(_B, "1", "c", lsn=10, ordinal=2),
            update(_A_RESENT, "1", "2", "d", lsn=10, ordinal=3),
            insert(_A, "3", None, "e", lsn=11, ordinal=0),
            message(b"m", lsn=11, commit_lsn=11, ordinal=1),
            insert(_A, "4", "4", "f", lsn=11, ordinal=2),
        ]
    )
    assert _columnar_rows(changes) == 5  # key 1 of public.a folded into its update
    plan = plan_batch(changes, columnar=True)
    assert {t.qualified_name: dict(t.counts) for t in plan.tables} == {
        "public.a": {"insert": 4, "update": 1, "delete": 0},
        "public.b": {"insert": 1, "update": 0, "delete": 0},
    }
    assert_columnar_equals_rows(changes)


@pytest.mark.skipif(
    os.environ.get(PURE_PYTHON_ENV, "") not in {"", "0"},
    reason="the Python reference was asked for",
)
def test_the_installed_daemon_runs_the_compiled_columnar_kernel() -> None:
    # make test installs with a compiler; without the kernel the planner would take its
    # reference path, and the columnar comparisons above would compare it with itself.
    assert kernel.KERNEL == "compiled"


def test_the_environment_can_ask_for_the_planner_reference_path() -> None:
    probe = "import sink.planning.kernel as k; print(k.KERNEL, k.fold_text_rows.__module__)"
    env = {**os.environ, PURE_PYTHON_ENV: "1"}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["python", "sink.planning.kernel"]
