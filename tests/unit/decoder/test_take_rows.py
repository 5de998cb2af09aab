"""``Assembler.take_row_frames`` buffers what ``feed`` would, frame for frame.

The capture loop hands each read burst to ``take_row_frames`` first (runs of row messages
inside a transaction, validated and buffered by the compiled kernel in one pass) and every
frame it does not take to ``read_xlog_data`` + ``feed``. Fed both ways, the same frames -
row messages, damaged ones, keepalives, BEGIN/COMMIT, RELATION, spilling buffers of any
budget - give the same committed transactions, the same replayed changes and the same
error. The burst counts it returns are checked against the frames themselves.
"""

from __future__ import annotations

import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decoder import (
    Assembler,
    AssemblerOutput,
    CommittedTransaction,
    DecodeError,
    Delete,
    Oid,
    ProtocolOptions,
    Update,
    read_xlog_data,
    spilling_buffers,
)
from tests.support.pgoutput_builder import (
    begin,
    commit,
    encode_message,
    insert,
    relation,
    text_tuple,
)

OPTIONS = ProtocolOptions(proto_version=1)
T = 16384
INT4, TEXT = 23, 25


def xlog(wal_start: int, payload: bytes) -> bytes:
    return b"w" + struct.pack(">QQQ", wal_start, wal_start + 8, 0) + payload


def keepalive(wal_end: int) -> bytes:
    return b"k" + struct.pack(">QQB", wal_end, 0, 0)


def _row(kind: str, key: int, note: str | None) -> bytes:
    if kind == "insert":
        return encode_message(insert(T, str(key), note), OPTIONS)
    if kind == "update":
        return encode_message(
            Update(
                xid=None,
                relation_id=Oid(T),
                old_kind=None,
                old_tuple=None,
                new_tuple=text_tuple(str(key), note),
            ),
            OPTIONS,
        )
    return encode_message(
        Delete(xid=None, relation_id=Oid(T), old_kind="K", old_tuple=text_tuple(str(key), None)),
        OPTIONS,
    )


@st.composite
def bursts(draw: st.DrawFn) -> list[bytes]:
    """Frames of a few transactions: rows, some damaged, keepalives in between."""
    frames: list[bytes] = []
    lsn = 0x1000
    schema = relation(T, columns=(("id", INT4, True), ("note", TEXT)))
    for number in range(draw(st.integers(1, 3))):
        start = lsn
        body: list[bytes] = [xlog(lsn, encode_message(schema, OPTIONS))]
        for _ in range(draw(st.integers(0, 25))):
            lsn += 16
            what = draw(st.sampled_from(["insert"] * 6 + ["update"] * 3 + ["delete", "other"]))
            if what == "other":
                body.append(keepalive(lsn))
                continue
            payload = _row(what, draw(st.integers(0, 99)), draw(st.none() | st.text(max_size=40)))
            if draw(st.integers(0, 249)) == 0:
                payload = payload[: draw(st.integers(0, len(payload) - 1))]  # damaged
            body.append(xlog(lsn, payload))
        lsn += 16
        frames.append(xlog(start, encode_message(begin(700 + number, lsn), OPTIONS)))
        frames.extend(body)
        frames.append(xlog(lsn, encode_message(commit(lsn, lsn + 8), OPTIONS)))
        lsn += 16
    return frames


def _outcome(assembler: Assembler, outputs: list[AssemblerOutput]) -> list[object]:
    result: list[object] = []
    for output in outputs:
        if isinstance(output, CommittedTransaction):
            result.append((output.commit_lsn, output.change_count))
            result.extend(repr(change) for change in assembler.replay(output))
        else:
            result.append(repr(output))
    return result


def feed_one_by_one(assembler: Assembler, frames: list[bytes]) -> list[object]:
    outputs: list[AssemblerOutput] = []
    try:
        for frame in frames:
            split = read_xlog_data(frame)
            if split is not None:
                outputs.extend(assembler.feed(*split))
    except DecodeError as exc:
        return [*_outcome(assembler, outputs), ("error", type(exc).__name__, str(exc))]
    return _outcome(assembler, outputs)


def feed_in_runs(assembler: Assembler, frames: list[bytes]) -> tuple[list[object], int]:
    """As the capture loop does; also the row frames ``take_row_frames`` took."""
    outputs: list[AssemblerOutput] = []
    taken_total = 0
    index = 0
    try:
        while index < len(frames):
            taken = assembler.take_row_frames(frames, index)
            if taken is not None:
                taken_payloads = [f[25:] for f in frames[index : index + taken.frames]]
                assert taken.payload_bytes == sum(len(p) for p in taken_payloads)
                assert [taken.inserts, taken.updates, taken.deletes] == [
                    sum(p[:1] == tag for p in taken_payloads) for tag in (b"I", b"U", b"D")
                ]
                assert (
                    taken.wal_start == struct.unpack(">Q", frames[index + taken.frames - 1][1:9])[0]
                )
                taken_total += taken.frames
                index += taken.frames
                continue
            split = read_xlog_data(frames[index])
            if split is not None:
                outputs.extend(assembler.feed(*split))
            index += 1
    except DecodeError as exc:
        return [*_outcome(assembler, outputs), ("error", type(exc).__name__, str(exc))], taken_total
    return _outcome(assembler, outputs), taken_total


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(frames=bursts(), limit=st.sampled_from([None, 0, 60, 400, 5_000]))
def test_runs_of_row_frames_buffer_what_feed_buffers(
    frames: list[bytes], limit: int | None, tmp_path: Path
) -> None:
    def assembler() -> Assembler:
        if limit is None:
            return Assembler(OPTIONS)
        return Assembler(OPTIONS, buffers=spilling_buffers(tmp_path, limit))

    reference = feed_one_by_one(assembler(), frames)
    fast, _ = feed_in_runs(assembler(), frames)
    assert fast == reference


def test_rows_are_taken_in_one_pass_and_the_rest_is_left_to_feed() -> None:
    schema = relation(T, columns=(("id", INT4, True), ("note", TEXT)))
    rows = [xlog(0x2000 + i, _row("insert", i, "x")) for i in range(5)]
    frames = [
        xlog(0x1000, encode_message(begin(9, 0x4000), OPTIONS)),
        xlog(0x1001, encode_message(schema, OPTIONS)),
        *rows,
        keepalive(0x3000),
        xlog(0x3001, _row("delete", 1, None)),
        xlog(0x4000, encode_message(commit(0x4000), OPTIONS)),
    ]
    assembler = Assembler(OPTIONS)
    assert assembler.take_row_frames(frames, 0) is None  # BEGIN: not inside a transaction
    for frame in frames[:2]:
        split = read_xlog_data(frame)
        assert split is not None
        assembler.feed(*split)
    taken = assembler.take_row_frames(frames, 2)
    assert taken is not None
    assert (taken.frames, taken.inserts, taken.updates, taken.deletes) == (5, 5, 0, 0)
    assert taken.wal_start == 0x2004
    assert assembler.take_row_frames(frames, 7) is None  # a keepalive
    taken = assembler.take_row_frames(frames, 8)
    assert taken is not None
    assert (taken.frames, taken.deletes) == (1, 1)
    assert assembler.take_row_frames(frames, 9) is None  # COMMIT goes through feed
    split = read_xlog_data(frames[9])
    assert split is not None
    (committed,) = assembler.feed(*split)
    assert isinstance(committed, CommittedTransaction)
    assert committed.change_count == 6


def test_a_buffer_without_memory_room_takes_nothing(tmp_path: Path) -> None:
    schema = relation(T, columns=(("id", INT4, True), ("note", TEXT)))
    assembler = Assembler(OPTIONS, buffers=spilling_buffers(tmp_path, 0))
    for message in (begin(9, 0x9000), schema):
        assembler.feed(0x1000, encode_message(message, OPTIONS))
    row = xlog(0x2000, _row("insert", 1, "x"))
    assert assembler.take_row_frames([row], 0) is None
    assert assembler.feed(0x2000, row[25:]) == []
