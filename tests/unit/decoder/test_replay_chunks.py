"""``Assembler.replay_chunks``: the changes of ``replay``, cut at the caller's limits, weighed
and counted per relation and operation in the same pass (the capture session's hot path).

``Assembler.replay_chunks`` in ``decoder/assembler.py`` and ``ReplayQueue.replay_chunks`` in
``decoder/replay.py`` are deliberate twins in their signature: the first is the public
entry and hands its arguments to the second. The ``TruncateChange`` and ``MessageChange``
built in ``ReplayQueue._chunks`` share the shape of their keyword arguments (the commit's
position), which ``duplicates`` reports as a pair.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decoder import (
    Assembler,
    ChunkLimits,
    CommittedTransaction,
    Delete,
    Message,
    MessageChange,
    ProtocolOptions,
    Relation,
    RowChange,
    Truncate,
    TruncateChange,
    TupleData,
    Update,
)
from decoder import replay as replay_module
from decoder.errors import ProtocolSequenceError
from decoder.messages import StreamStop
from decoder.replay import ReplayChunk
from tests.support.decoder_data import active_kernel
from tests.support.pgoutput_builder import (
    INT4_OID,
    TEXT_OID,
    begin,
    commit,
    encode_message,
    feed_messages,
    insert,
    logical_message,
    relation,
    stream_commit,
    stream_start,
    text_tuple,
)

T, U = 16384, 16385
OVERHEAD = 100
COLUMNS = (("id", INT4_OID, True), ("note", TEXT_OID))


def _mixed(rows: int) -> list[Message]:
    """Inserts, updates with and without an old key, deletes, a truncate and a message."""
    messages: list[Message] = [
        begin(700, 0x9000),
        relation(T, "t", COLUMNS),
        relation(U, "u", COLUMNS),
    ]
    for n in range(rows):
        target = T if n % 3 else U
        match n % 4:
            case 0:
                messages.append(insert(target, str(n), "x" * (n % 7)))
            case 1:
                messages.append(
                    Update(
                        xid=None,
                        relation_id=target,
                        old_kind=None,
                        old_tuple=None,
                        new_tuple=text_tuple(str(n), "new"),
                    )
                )
            case 2:
                messages.append(
                    Update(
                        xid=None,
                        relation_id=target,
                        old_kind="K",
                        old_tuple=text_tuple(str(n - 1), None),
                        new_tuple=text_tuple(str(n), "moved"),
                    )
                )
            case _:
                messages.append(
                    Delete(xid=None, relation_id=target, old_kind="K", old_tuple=text_tuple(str(n)))
                )
    messages.append(Truncate(xid=None, options=0, relation_ids=(T, U)))
    messages.append(logical_message("audit", b"content", transactional=True, xid=None))
    messages.append(commit(0x9000))
    return messages


def _committed(messages: Sequence[Message]) -> tuple[Assembler, CommittedTransaction]:
    assembler = Assembler(ProtocolOptions(proto_version=1, messages=True))
    outputs = feed_messages(assembler, messages)
    (txn,) = [o for o in outputs if isinstance(o, CommittedTransaction)]
    return assembler, txn


def _weight(message: Message, change: object) -> int:
    if isinstance(change, MessageChange):
        return OVERHEAD + len(change.content)
    if isinstance(change, TruncateChange):
        return OVERHEAD
    return OVERHEAD + len(encode_message(message))


def _cut(
    chunks: Iterator[ReplayChunk], limits: ChunkLimits, sizes: list[int], weights: list[int]
) -> Iterator[ReplayChunk]:
    """Read ``chunks``, setting the limits of each next chunk from ``sizes`` and ``weights``
    in turn (they stay set while the caller looks at the chunk)."""
    index = 0
    while True:
        limits.max_changes = sizes[index % len(sizes)]
        limits.max_weight = weights[index % len(weights)]
        chunk = next(chunks, None)
        if chunk is None:
            return
        index += 1
        yield chunk


@given(
    rows=st.integers(min_value=0, max_value=60),
    sizes=st.lists(st.integers(min_value=0, max_value=9), min_size=1, max_size=20),
    weights=st.lists(st.integers(min_value=-1, max_value=400), min_size=1, max_size=20),
)
def test_chunks_hold_the_replayed_changes_cut_at_the_limits_of_each_chunk(
    rows: int, sizes: list[int], weights: list[int]
) -> None:
    messages = _mixed(rows)
    reference_assembler, reference_txn = _committed(messages)
    expected = list(reference_assembler.replay(reference_txn))
    sent = messages[3:-1]  # what became changes, in order

    assembler, txn = _committed(messages)
    limits = ChunkLimits(change_overhead=OVERHEAD)
    counts: dict[tuple[int, str], int] = {}
    relations: dict[tuple[int, str], Relation] = {}
    taken: list[object] = []
    chunks = assembler.replay_chunks(txn, limits, counts, relations)
    for chunk in _cut(chunks, limits, sizes, weights):
        start = len(taken)
        taken.extend(chunk.changes)
        weighed = [_weight(sent[i], taken[i]) for i in range(start, len(taken))]
        assert chunk.weight == sum(weighed)
        assert chunk.changes, "a chunk holds at least one change"
        last = len(chunk.changes)
        # It ends at the first change that fills it, or at the transaction's end.
        full = [
            n
            for n in range(1, last + 1)
            if n >= limits.max_changes or sum(weighed[:n]) >= limits.max_weight >= 0
        ]
        if len(taken) < len(expected):
            assert full[:1] == [last]
        else:
            assert not full or full[0] == last
    assert taken == expected

    by_name = {(relations[key].relation_name, key[1]): count for key, count in counts.items()}
    want: dict[tuple[str, str], int] = {}
    for change in expected:
        if isinstance(change, RowChange):
            name_op = (change.relation.relation_name, change.op)
            want[name_op] = want.get(name_op, 0) + 1
    want[("t", "truncate")] = 1
    want[("u", "truncate")] = 1
    assert by_name == want


def test_a_relation_replaced_in_the_transaction_is_counted_under_each_version() -> None:
    renamed = relation(T, "t_renamed", COLUMNS)
    messages = [
        begin(700, 0x9000),
        relation(T, "t", COLUMNS),
        insert(T, "1", "a"),
        insert(T, "2", "b"),
        renamed,
        insert(T, "3", "c"),
        commit(0x9000),
    ]
    assembler, txn = _committed(messages)
    counts: dict[tuple[int, str], int] = {}
    relations: dict[tuple[int, str], Relation] = {}
    chunks = list(assembler.replay_chunks(txn, ChunkLimits(), counts, relations))
    assert [len(c.changes) for c in chunks] == [3]
    assert sorted(
        (relations[key].relation_name, key[1], count) for key, count in counts.items()
    ) == [("t", "insert", 2), ("t_renamed", "insert", 1)]


def test_a_chunked_replay_closed_early_still_applies_the_rest_of_the_schema() -> None:
    """As ``replay``: what is not read still moves the relation cache on."""
    messages = [
        begin(700, 0x9000),
        relation(T, "t", COLUMNS),
        insert(T, "1", "a"),
        relation(U, "u", COLUMNS),
        insert(U, "2", "b"),
        commit(0x9000),
    ]
    assembler, txn = _committed(messages)
    chunks = assembler.replay_chunks(txn, ChunkLimits(max_changes=1), {}, {})
    first = next(chunks)
    assert [c.relation.relation_name for c in first.changes if isinstance(c, RowChange)] == ["t"]
    chunks.close()
    assert assembler.relations.relation(U) is not None


def test_the_next_replay_waits_for_the_chunks_to_be_read() -> None:
    assembler, txn = _committed(_mixed(4))
    chunks = assembler.replay_chunks(txn, ChunkLimits(max_changes=1), {}, {})
    next(chunks)
    with pytest.raises(Exception, match="unfinished"):
        assembler.replay(txn)
    chunks.close()


# --- the compiled loop (``replay_rows``) against the Python loop --------------------------


def _runs(kinds: list[tuple[int, int]], *, xid: int | None) -> list[Message]:
    """Row messages in runs: ``(kind, length)`` pairs; kind 0 inserts into T, 1 updates T
    without an old key, 2 updates T with one, 3 deletes from T by key, 4 inserts into U, 5
    a RELATION message for T in the middle of the transaction, 6 a logical message, 7
    deletes from T with the whole old row (REPLICA IDENTITY FULL)."""
    out: list[Message] = []
    n = 0
    for kind, length in kinds:
        for _ in range(length):
            n += 1
            key, note = str(n), "v" * (n % 5)
            match kind:
                case 0:
                    out.append(insert(T, key, note, xid=xid))
                case 1:
                    out.append(
                        Update(
                            xid=xid,
                            relation_id=T,
                            old_kind=None,
                            old_tuple=None,
                            new_tuple=text_tuple(key, note),
                        )
                    )
                case 2:
                    out.append(
                        Update(
                            xid=xid,
                            relation_id=T,
                            old_kind="K",
                            old_tuple=text_tuple(str(n - 1), None),
                            new_tuple=text_tuple(key, note),
                        )
                    )
                case 3:
                    out.append(
                        Delete(
                            xid=xid, relation_id=T, old_kind="K", old_tuple=text_tuple(key, None)
                        )
                    )
                case 7:
                    out.append(
                        Delete(
                            xid=xid, relation_id=T, old_kind="O", old_tuple=text_tuple(key, note)
                        )
                    )
                case 4:
                    out.append(insert(U, key, note, xid=xid))
                case 5:
                    out.append(relation(T, f"t{n}", COLUMNS, xid=xid))
                case _:
                    out.append(logical_message("audit", key.encode(), transactional=True, xid=xid))
    return out


def _replayed(
    messages: Sequence[Message], options: ProtocolOptions, sizes: list[int], weights: list[int]
) -> tuple[list[tuple[list[object], int]], dict[tuple[str, str], int]]:
    assembler = Assembler(options)
    outputs = feed_messages(assembler, messages)
    chunks_out: list[tuple[list[object], int]] = []
    counts: dict[tuple[int, str], int] = {}
    relations: dict[tuple[int, str], Relation] = {}
    for txn in [o for o in outputs if isinstance(o, CommittedTransaction)]:
        limits = ChunkLimits(change_overhead=OVERHEAD)
        chunks = assembler.replay_chunks(txn, limits, counts, relations)
        for chunk in _cut(chunks, limits, sizes, weights):
            described = [
                (type(c), c, c.new.wire if isinstance(c, RowChange) and c.new else None)
                for c in chunk.changes
            ]
            chunks_out.append((described, chunk.weight))
    by_name = {(relations[key].relation_name, key[1]): count for key, count in counts.items()}
    return chunks_out, by_name


@given(
    kinds=st.lists(st.tuples(st.integers(0, 7), st.integers(1, 8)), max_size=10),
    streamed=st.booleans(),
    sizes=st.lists(st.integers(min_value=0, max_value=12), min_size=1, max_size=8),
    weights=st.lists(st.integers(min_value=-1, max_value=900), min_size=1, max_size=8),
)
def test_the_compiled_loop_replays_what_the_python_loop_replays(
    kinds: list[tuple[int, int]], streamed: bool, sizes: list[int], weights: list[int]
) -> None:
    active_kernel()
    if streamed:
        options = ProtocolOptions(proto_version=2, streaming="on", messages=True)
        body = _runs(kinds, xid=900)
        messages: list[Message] = [
            stream_start(900, first_segment=True),
            relation(T, "t", COLUMNS, xid=900),
            relation(U, "u", COLUMNS, xid=900),
            *body,
            StreamStop(),
            stream_commit(900, 0x9000),
        ]
    else:
        options = ProtocolOptions(proto_version=1, messages=True)
        body = _runs(kinds, xid=None)
        messages = [
            begin(700, 0x9000),
            relation(T, "t", COLUMNS),
            relation(U, "u", COLUMNS),
            *body,
            commit(0x9000),
        ]
    compiled = _replayed(messages, options, sizes, weights)
    with patch.object(replay_module, "_replay_rows", None):
        reference = _replayed(messages, options, sizes, weights)
    assert compiled == reference


def test_the_compiled_loop_stops_at_a_relation_it_does_not_know() -> None:
    active_kernel()
    messages = [
        begin(700, 0x9000),
        relation(T, "t", COLUMNS),
        insert(T, "1", "a"),
        insert(U, "2", "b"),
        commit(0x9000),
    ]
    assembler, txn = _committed(messages)
    with pytest.raises(ProtocolSequenceError, match=f"relation {U} is unknown"):
        list(assembler.replay(txn))


def test_the_compiled_loop_refuses_a_type_without_slots_and_keeps_working() -> None:
    kernel = active_kernel()

    class NoSlots:  # RowChange's field names, as plain class attributes
        op = relation = new = old = old_kind = None
        commit_lsn = commit_time = ordinal = xid = None

    def replay_rows_with(row_type: type) -> None:
        kernel.replay_rows(
            iter([]), {}, None, row_type, TupleData, 1, 0, 0, None, 0, [], 0, 10, -1, 0
        )

    replay_rows_with(RowChange)  # its slots are looked up and kept
    with pytest.raises(TypeError, match="is not a slot"):
        replay_rows_with(NoSlots)
    replay_rows_with(RowChange)  # the slots kept before are intact
    messages = [begin(700, 0x9000), relation(T, "t", COLUMNS), insert(T, "1", "a")]
    messages += [insert(T, "2", "b"), commit(0x9000)]
    assembler, txn = _committed(messages)
    replayed = [tuple(v.data for v in c.new.values) for c in assembler.replay(txn)]
    assert replayed == [(b"1", b"a"), (b"2", b"b")]  # the second one through the kernel
