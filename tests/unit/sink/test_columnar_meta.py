"""``sink.kernel.columnar_meta``: the metadata columns of a merge step's columnar rows, in C.

The planner (``sink.plan._freeze_step``) hands it the step's row entries - indexes of
folded changes mixed with rows planned the general way - and gets the live rows' commit
LSNs, ordinals, commit times and delete flags as Arrow buffers. The model here says what
each buffer must hold; the planner-level comparison with the row path is
``tests/unit/sink/test_columnar.py``.
"""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from types import ModuleType

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decoder import Lsn, PgTimestamp, RowChange
from sink.planning import kernel as sink_kernel
from sink.planning.columnar import columnar_rows
from sink.planning.kernel import ColumnarMeta, columnar_meta
from tests.support.sink_changes import col, rel

RELATION = rel("t", col("id", key=True))
PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def _change(lsn: int, time: int, ordinal: int) -> RowChange:
    return RowChange(
        op="insert",
        relation=RELATION,
        new=None,
        old=None,
        old_kind=None,
        commit_lsn=Lsn(lsn),
        commit_time=PgTimestamp(time),
        ordinal=ordinal,
    )


def _int64s(data: bytes) -> list[int]:
    return list(struct.unpack(f"={len(data) // 8}q", data))


def _bits(data: bytes, count: int) -> list[bool]:
    return [bool(data[i // 8] >> (i % 8) & 1) for i in range(count)]


@st.composite
def steps(draw: st.DrawFn) -> tuple[list[object], list[RowChange], list[bool]]:
    """A step's row entries (some indexes of folded changes, in any order, and other
    rows), its folded changes and their delete flags."""
    count = draw(st.integers(0, 40))
    changes = [
        _change(
            draw(st.integers(0, 2**63 - 1)),
            draw(st.integers(-(2**52), 2**52)),
            draw(st.integers(0, 2**31)),
        )
        for _ in range(count)
    ]
    deletes = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    order = draw(st.permutations(range(count)))
    live = order[: draw(st.integers(0, count))]
    others: list[object] = [object() for _ in range(draw(st.integers(0, 5)))]
    entries: list[object] = list(live)
    for other in others:
        entries.insert(draw(st.integers(0, len(entries))), other)
    return entries, changes, deletes


@settings(max_examples=300, deadline=None)
@given(steps())
def test_columnar_meta_lays_out_the_live_rows_in_folding_order(
    step: tuple[list[object], list[RowChange], list[bool]],
) -> None:
    active_kernel()
    entries, changes, deletes = step
    meta = columnar_meta(entries, changes, deletes)
    assert meta is not None
    live = sorted(e for e in entries if type(e) is int)
    assert meta.others == [e for e in entries if type(e) is not int]
    if len(live) == len(changes):
        assert meta.live is None
    else:
        assert meta.live is not None
        assert _int64s(meta.live) == live
    assert _int64s(meta.lsns) == [changes[i].commit_lsn for i in live]
    assert _int64s(meta.ordinals) == [changes[i].ordinal for i in live]
    epoch = int((PG_EPOCH - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1))
    assert _int64s(meta.micros) == [changes[i].commit_time + epoch for i in live]
    assert _bits(meta.deletes, len(live)) == [deletes[i] for i in live]
    assert len(meta.deletes) == (len(live) + 7) // 8


def test_columnar_rows_narrow_the_values_and_type_the_metadata() -> None:
    active_kernel()
    changes = [_change(100 + i, i * 1_000_000, i) for i in range(4)]
    meta = columnar_meta([3, "row", 1], changes, [False, True, False, False])
    assert meta is not None
    rows = columnar_rows((pa.array([10, 11, 12, 13], pa.int64()),), meta)
    assert rows.values[0].to_pylist() == [11, 13]
    assert rows.lsns.to_pylist() == [101, 103]
    assert rows.ordinals.to_pylist() == [1, 3]
    assert rows.commit_times.type == pa.timestamp("us", tz="UTC")
    assert rows.commit_times.to_pylist() == [
        PG_EPOCH + timedelta(seconds=1),
        PG_EPOCH + timedelta(seconds=3),
    ]
    assert rows.deletes.to_pylist() == [True, False]
    assert len(rows) == 2


@pytest.mark.parametrize("entries", [[0, 0], [2], [-1]], ids=["repeated", "past", "negative"])
def test_an_index_out_of_range_or_repeated_is_an_error(entries: list[object]) -> None:
    active_kernel()
    changes = [_change(1, 1, 0), _change(2, 2, 1)]
    with pytest.raises(ValueError, match="out of range or repeated"):
        columnar_meta(entries, changes, [False, False])


def test_an_entry_that_is_not_a_change_is_an_error() -> None:
    kernel = active_kernel()
    with pytest.raises(TypeError, match="is not a"):
        kernel.columnar_meta([0], [object()], [False], RowChange)
    with pytest.raises(TypeError, match="one length"):
        kernel.columnar_meta([], [_change(1, 1, 0)], [], RowChange)


def test_the_answer_is_a_columnar_meta() -> None:
    active_kernel()
    assert isinstance(columnar_meta([], [], []), ColumnarMeta)


def active_kernel() -> ModuleType:
    """The sink's compiled kernel; the test fails when it is not built (it compares nothing
    then)."""
    compiled = sink_kernel.COMPILED
    if compiled is None:
        pytest.fail("the sink's C kernel was not built (no C compiler at install?)")
    return compiled
