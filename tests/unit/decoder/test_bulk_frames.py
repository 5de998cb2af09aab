"""Runs of row messages taken in bulk equal the same frames fed one by one.

``Assembler.feed_row_frames`` (through ``FileChangeBuffer.absorb_frames`` and the kernel's
``absorb``) is the receive loop's bulk path; ``Assembler.feed`` is the reference. Fed
both ways - the bulk path as ``capture.session.Session._on_frames`` uses it - the same
frames give the same outputs, the same replayed changes, the same errors and the same
memory accounting: on generated streams of transactions with inserts, updates and
deletes, keepalives, damaged row messages and budgets small enough to spill.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoder import (
    Assembler,
    CommittedTransaction,
    CountingChangeBuffer,
    DecodeError,
    MemoryChangeBuffer,
    ProtocolOptions,
    read_xlog_data,
    spilling_buffers,
    xlog_records,
)
from decoder.frames import xlog_records_reference
from decoder.messages import Delete, Insert, Message, Update
from decoder.spill import AbsorbedFrames, ChangeBufferFactory, FileChangeBuffer, MemoryBudget
from tests.support.decoder_data import active_kernel
from tests.support.pgoutput_builder import (
    INT4_OID,
    begin,
    commit,
    encode_message,
    relation,
    text_tuple,
)

OPTIONS = ProtocolOptions(proto_version=1)
RELATION_ID = 16384
RELATION = relation(RELATION_ID, "t", (("id", INT4_OID, True), ("v", 25)))


def xlog(payload: bytes, wal_start: int) -> bytes:
    """An XLogData frame: 'w', start and end LSN, send time, then the payload."""
    return b"w" + struct.pack(">QQQ", wal_start, wal_start + len(payload), 0) + payload


def keepalive(wal_end: int) -> bytes:
    return b"k" + struct.pack(">QQB", wal_end, 0, 0)


def _row(kind: str, key: int, value: str) -> Message:
    new = text_tuple(str(key), value)
    old = text_tuple(str(key), None)
    if kind == "insert":
        return Insert(xid=None, relation_id=RELATION_ID, new_tuple=new)
    if kind == "update":
        return Update(
            xid=None, relation_id=RELATION_ID, old_kind=None, old_tuple=None, new_tuple=new
        )
    if kind == "update-key":
        return Update(xid=None, relation_id=RELATION_ID, old_kind="K", old_tuple=old, new_tuple=new)
    return Delete(xid=None, relation_id=RELATION_ID, old_kind="K", old_tuple=old)


_ROWS = st.tuples(
    st.sampled_from(["insert", "update", "update-key", "delete"]),
    st.integers(0, 9),
    st.text(alphabet="abxyz", max_size=40),
)


@st.composite
def streams(draw: st.DrawFn) -> list[bytes]:
    """Frames of a few transactions: rows, keepalives in between, now and then damage."""
    frames: list[bytes] = []
    lsn = 0x1000
    for xid in range(draw(st.integers(1, 4))):
        lsn += 0x100
        payloads = [encode_message(begin(100 + xid, lsn), OPTIONS)]
        if draw(st.booleans()):
            payloads.append(encode_message(RELATION, OPTIONS))
        for kind, key, value in draw(st.lists(_ROWS, max_size=12)):
            payloads.append(encode_message(_row(kind, key, value), OPTIONS))
        payloads.append(encode_message(commit(lsn), OPTIONS))
        for index, payload in enumerate(payloads):
            roll = draw(st.integers(0, 49))
            if roll == 1:
                frames.append(keepalive(lsn))
            damaged = roll == 0 and len(payload) > 1  # feed raises for the message
            frames.append(xlog(payload[:-1] if damaged else payload, lsn + index))
    return frames


Outcome = tuple[list[object], list[object], tuple[str, str] | None]


def _outputs(assembler: Assembler, frames: list[bytes], *, bulk: bool) -> Iterator[object]:
    """Feed ``frames`` as the receive loop does (``Session._on_frames``); yield the outputs."""
    position = 0
    while position < len(frames):
        if bulk:
            run = assembler.feed_row_frames(frames, position)
            if run is not None and run.stop > position:
                position = run.stop
                continue
        split = read_xlog_data(frames[position])
        position += 1
        if split is not None:  # else a keepalive
            yield from assembler.feed(*split)


def _feed(frames: list[bytes], buffers: ChangeBufferFactory, *, bulk: bool) -> Outcome:
    """What came out of ``frames``, the replayed changes, and the error."""
    assembler = Assembler(OPTIONS, buffers=buffers)
    outputs: list[object] = []
    changes: list[object] = []
    error: tuple[str, str] | None = None
    try:
        # Feed the schema first, as a real stream sends it before the first row.
        _feed_relation(assembler)
        for output in _outputs(assembler, frames, bulk=bulk):
            outputs.append(output)
            if isinstance(output, CommittedTransaction):
                # What went to disk shows the memory accounting: the budget is shared.
                outputs.append(("spilled", assembler.spilled_bytes))
                changes.extend(assembler.replay(output))
    except DecodeError as exc:
        error = (type(exc).__name__, str(exc))
    return outputs, changes, error


def _feed_relation(assembler: Assembler, *, replay: bool = True) -> None:
    for output in assembler.feed(0x10, encode_message(begin(99, 0x20), OPTIONS)):
        raise AssertionError(output)
    assembler.feed(0x11, encode_message(RELATION, OPTIONS))
    for output in assembler.feed(0x12, encode_message(commit(0x20), OPTIONS)):
        assert isinstance(output, CommittedTransaction)
        if replay:
            list(assembler.replay(output))
        else:
            assembler.discard(output)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(frames=streams(), limit=st.sampled_from([0, 60, 300, 1_000_000]))
def test_bulk_runs_equal_frames_fed_one_by_one(
    tmp_path: Path, frames: list[bytes], limit: int
) -> None:
    active_kernel()
    one_by_one = _feed(frames, spilling_buffers(tmp_path, limit), bulk=False)
    in_bulk = _feed(frames, spilling_buffers(tmp_path, limit), bulk=True)
    assert in_bulk == one_by_one


def test_a_run_is_taken_whole_and_counted() -> None:
    active_kernel()
    rows = [_row("insert", 1, "a"), _row("update", 1, "b"), _row("delete", 2, "")]
    frames = [xlog(encode_message(row, OPTIONS), 0x100 + i) for i, row in enumerate(rows)]
    budget = MemoryBudget(1_000_000)
    buffer = FileChangeBuffer(Path("/nonexistent-never-written"), 0, budget)
    assert buffer.absorb_frames(frames, 0) is None  # an empty buffer appends its first record
    buffer.append(b"first")
    run = buffer.absorb_frames([keepalive(1), *frames, keepalive(2)], 1)
    payloads = [read_xlog_data(frame)[1] for frame in frames]  # type: ignore[index]
    assert run == AbsorbedFrames(
        4, sum(4 + len(p) for p in payloads), sum(map(len, payloads)), 0x102, 1, 1, 1
    )
    assert run.records == 3
    assert list(buffer) == [b"first", *payloads]
    assert buffer.size_bytes == budget.used_bytes == 9 + run.used_bytes


@pytest.mark.parametrize(
    "ends_the_run",
    [
        "keepalive",
        "short frame",
        "damaged row",
        "begin",
        "stream-block row",
        "no room",
        "not bytes",
    ],
)
def test_absorb_stops_untouched_at_the_first_frame_it_does_not_take(ends_the_run: str) -> None:
    kernel = active_kernel()
    good = xlog(encode_message(_row("insert", 1, "a"), OPTIONS), 0x100)
    row = encode_message(_row("insert", 2, "b"), OPTIONS)
    room = 1_000_000
    other: object
    if ends_the_run == "keepalive":
        other = keepalive(0x200)
    elif ends_the_run == "short frame":
        other = b"w" + bytes(24)
    elif ends_the_run == "damaged row":
        other = xlog(row[:-1], 0x101)
    elif ends_the_run == "begin":
        other = xlog(encode_message(begin(5, 0x300), OPTIONS), 0x101)
    elif ends_the_run == "stream-block row":
        streamed = ProtocolOptions(proto_version=2, streaming="on")
        other = xlog(
            encode_message(
                Insert(xid=7, relation_id=RELATION_ID, new_tuple=text_tuple("3", "c")), streamed
            ),
            0x101,
        )
    elif ends_the_run == "no room":
        other = xlog(row, 0x101)
        room = len(good) - 25 + 4 + len(row) + 3  # the second record does not fit
    else:
        other = bytearray(xlog(row, 0x101))
    records: list[bytes] = []
    stop, used, payload_bytes, wal_start, inserts, updates, deletes = kernel.absorb(
        [good, other, good], 0, records, room, 4
    )
    assert (stop, inserts, updates, deletes, wal_start) == (1, 1, 0, 0, 0x100)
    assert records == [good[25:]]
    assert (used, payload_bytes) == (len(good) - 25 + 4, len(good) - 25)


def test_a_counting_buffer_counts_a_run_as_appends_would() -> None:
    active_kernel()
    rows = [_row("insert", 1, "a"), _row("update", 1, "bb"), _row("delete", 2, "")]
    frames = [xlog(encode_message(row, OPTIONS), 0x100 + i) for i, row in enumerate(rows)]
    counted, appended = CountingChangeBuffer(), CountingChangeBuffer()
    run = counted.absorb_frames(frames, 0)
    for frame in frames:
        appended.append(frame[25:])
    assert run is not None
    assert run.records == 3
    assert counted.size_bytes == appended.size_bytes == run.used_bytes
    assert counted.mark() == appended.mark() == 3


def test_buffers_that_keep_no_memory_run_take_no_run(tmp_path: Path) -> None:
    frames = [xlog(encode_message(_row("insert", 1, "a"), OPTIONS), 0x100)]
    memory = MemoryChangeBuffer()
    memory.append(b"x")
    assert memory.absorb_frames(frames, 0) is None
    spilled = FileChangeBuffer(tmp_path, 0)
    spilled.append(b"x")  # over a zero budget: on disk
    assert spilled.absorb_frames(frames, 0) is None
    spilled.close()


def _count(frames: list[bytes], *, bulk: bool) -> tuple[list[object], tuple[str, str] | None]:
    """Feed ``frames`` to an assembler that only counts (``wal2delta capture``'s)."""
    assembler = Assembler(OPTIONS, buffers=CountingChangeBuffer)
    outputs: list[object] = []
    try:
        _feed_relation(assembler, replay=False)
        for output in _outputs(assembler, frames, bulk=bulk):
            outputs.append(output)
            if isinstance(output, CommittedTransaction):
                assembler.discard(output)
    except DecodeError as exc:
        return outputs, (type(exc).__name__, str(exc))
    return outputs, None


@settings(max_examples=100, deadline=None)
@given(frames=streams())
def test_a_counting_assembler_counts_bulk_runs_as_frames_fed_one_by_one(
    frames: list[bytes],
) -> None:
    active_kernel()
    assert _count(frames, bulk=True) == _count(frames, bulk=False)


@settings(max_examples=200, deadline=None)
@given(
    frames=st.lists(
        st.one_of(
            st.binary(max_size=40).map(lambda p: xlog(p, 0x1234)),
            st.binary(max_size=30),
        ),
        max_size=8,
    ),
    data=st.data(),
)
def test_xlog_records_answers_what_its_reference_answers(frames: list[bytes], data) -> None:
    active_kernel()
    start = data.draw(st.integers(0, len(frames)))
    stop = data.draw(st.integers(start, len(frames)))
    compiled: list[bytes] = []
    reference: list[bytes] = []
    outcomes = []
    for function, out in ((xlog_records, compiled), (xlog_records_reference, reference)):
        try:
            function(frames, start, stop, out)
            outcomes.append("ok")
        except ValueError:
            outcomes.append("ValueError")
    assert outcomes[0] == outcomes[1]
    if outcomes[0] == "ok":
        assert compiled == reference
