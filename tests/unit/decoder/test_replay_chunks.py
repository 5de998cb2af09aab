"""``Assembler.replay_chunks``: the changes of ``replay``, cut at the caller's limits, weighed
and counted per relation and operation in the same pass (the capture session's hot path)."""

from __future__ import annotations

from collections.abc import Sequence

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
    Update,
)
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
    index = 0
    while True:
        limits.max_changes = sizes[index % len(sizes)]
        limits.max_weight = weights[index % len(weights)]
        chunk = next(chunks, None)
        if chunk is None:
            break
        index += 1
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
