"""Assembler scenarios, hand-built: the scenario lists of PostgreSQL's subscription tests.

Ported (the scenarios, not the code) from ``src/test/subscription/t/015_stream.pl``,
``016_stream_subxact.pl``, ``018_stream_subxact_abort.pl``,
``019_stream_subxact_ddl_abort.pl``, ``021_twophase.pl``, ``023_twophase_stream.pl`` and
``contrib/test_decoding`` ``stream.sql``/``twophase_stream.sql``/``toast.sql``, plus the
replay contract of ``Assembler.replay``.
"""

from __future__ import annotations

import pytest

from decoder import (
    UNCHANGED_TOAST,
    Assembler,
    AssemblerState,
    ColumnKind,
    ColumnValue,
    CommittedTransaction,
    DecodeError,
    MalformedMessageError,
    MessageChange,
    NonTransactionalMessage,
    Origin,
    ProtocolOptions,
    ProtocolSequenceError,
    Relation,
    RowChange,
    StreamAborted,
    StreamStop,
    TransactionPrepared,
    TransactionRolledBack,
    Truncate,
    TruncateChange,
    TupleData,
    Update,
    decode_tuple,
)
from tests.support.pgoutput_builder import (
    INT4_OID,
    TEXT_OID,
    begin,
    begin_prepare,
    commit,
    commit_prepared,
    encode_message,
    feed_messages,
    insert,
    logical_message,
    prepare,
    relation,
    replay_committed,
    rollback_prepared,
    stream_abort,
    stream_commit,
    stream_prepare,
    stream_start,
)

OPTIONS = ProtocolOptions(4, "parallel", two_phase=True, messages=True)
T = 16384  # relation id of "t"
COLUMNS = (("id", INT4_OID, True), ("note", TEXT_OID))


def t_relation(xid: int | None = None, columns=COLUMNS) -> Relation:
    return relation(T, "t", columns, xid=xid)


def ids(changes) -> list[int]:
    """The first column of every replayed row change, as an integer."""
    result = []
    for change in changes:
        if isinstance(change, RowChange):
            tuple_data = change.new or change.old
            assert tuple_data is not None
            result.append(int(tuple_data.values[0].data or b""))
    return result


def new_assembler(options: ProtocolOptions = OPTIONS) -> Assembler:
    return Assembler(options)


def plain_txn(xid: int, lsn: int, *values: int, with_relation: bool = True) -> list:
    body = [t_relation()] if with_relation else []
    return [begin(xid, lsn), *body, *(insert(T, str(v), "x") for v in values), commit(lsn)]


# ------------------------------------------------------------------------------ 015_stream


def test_streamed_transaction_replays_all_its_blocks_at_stream_commit():
    assembler = new_assembler()
    outputs = feed_messages(
        assembler,
        [
            stream_start(500, first_segment=True),
            t_relation(500),
            insert(T, "1", "a", xid=500),
            StreamStop(),
            stream_start(500, first_segment=False),
            insert(T, "2", "b", xid=500),
            StreamStop(),
        ],
    )
    assert outputs == []
    assert assembler.open_streamed_transactions == 1
    assert not assembler.idle
    (txn,) = feed_messages(assembler, [stream_commit(500, 0x900, commit_time=77)])
    assert isinstance(txn, CommittedTransaction)
    assert (txn.kind, txn.xid, txn.commit_lsn, txn.end_lsn, txn.commit_time) == (
        "stream_commit",
        500,
        0x900,
        0x908,
        77,
    )
    assert txn.change_count == 2
    changes = list(assembler.replay(txn))
    assert ids(changes) == [1, 2]
    assert [c.ordinal for c in changes] == [0, 1]
    assert assembler.idle


def test_interleaved_streamed_transactions_replay_in_commit_order_with_their_own_changes():
    assembler = new_assembler()
    outputs = feed_messages(
        assembler,
        [
            stream_start(501, first_segment=True),
            t_relation(501),
            insert(T, "1", xid=501),
            StreamStop(),
            stream_start(502, first_segment=True),
            t_relation(502),
            insert(T, "10", xid=502),
            StreamStop(),
            *plain_txn(503, 0x500, 100),
            stream_start(501, first_segment=False),
            insert(T, "2", xid=501),
            StreamStop(),
            stream_commit(502, 0x600),
            stream_start(501, first_segment=False),
            insert(T, "3", xid=501),
            StreamStop(),
            stream_commit(501, 0x700),
        ],
    )
    committed = [o for o in outputs if isinstance(o, CommittedTransaction)]
    assert [t.xid for t in committed] == [503, 502, 501]
    assert [ids(assembler.replay(t)) for t in committed] == [[100], [10], [1, 2, 3]]


def test_non_transactional_message_between_stream_blocks_comes_out_at_once():
    assembler = new_assembler()
    outputs = feed_messages(
        assembler,
        [
            stream_start(500, first_segment=True),
            logical_message("p", b"in txn", transactional=True, xid=500),
            StreamStop(),
            logical_message("p", b"now", transactional=False, lsn=0x42),
        ],
    )
    assert outputs == [NonTransactionalMessage(lsn=0x42, prefix="p", content=b"now")]
    (txn,) = feed_messages(assembler, [stream_commit(500, 0x900)])
    (change,) = list(assembler.replay(txn))
    assert isinstance(change, MessageChange)
    assert (change.content, change.transactional, change.commit_lsn) == (b"in txn", True, 0x900)


# ---------------------------------------------------------------------- 016/018 subxacts


def streamed(xid: int, *parts: tuple[int, int]) -> list:
    """One stream block of transaction ``xid`` inserting (subxid, value) pairs."""
    return [
        stream_start(xid, first_segment=True),
        t_relation(xid),
        *(insert(T, str(value), xid=subxid) for subxid, value in parts),
        StreamStop(),
    ]


def test_released_subtransactions_are_kept():
    assembler = new_assembler()
    feed_messages(assembler, streamed(600, (600, 1), (601, 2), (602, 3), (600, 4)))
    (txn,) = feed_messages(assembler, [stream_commit(600, 0x900)])
    assert ids(assembler.replay(txn)) == [1, 2, 3, 4]


def test_stream_abort_of_a_subtransaction_drops_only_its_changes_and_later_ones():
    assembler = new_assembler()
    feed_messages(assembler, streamed(600, (600, 1), (601, 2), (602, 3), (602, 4)))
    (aborted,) = feed_messages(assembler, [stream_abort(600, 602, abort_lsn=0x800)])
    assert aborted == StreamAborted(xid=600, subxid=602, abort_lsn=0x800, abort_time=0)
    feed_messages(
        assembler,
        [stream_start(600, first_segment=False), insert(T, "5", xid=603), StreamStop()],
    )
    (txn,) = feed_messages(assembler, [stream_commit(600, 0x900)])
    assert txn.change_count == 3
    assert ids(assembler.replay(txn)) == [1, 2, 5]


def test_aborting_an_earlier_subtransaction_forgets_the_ones_recorded_after_it():
    # ROLLBACK TO an outer savepoint aborts its nested subtransactions too; PostgreSQL sends
    # an abort per subxid, children first. Truncating at the outer one's first change is
    # what worker.c does; the later aborts then find nothing and change nothing.
    assembler = new_assembler()
    feed_messages(assembler, streamed(600, (600, 1), (601, 2), (602, 3), (603, 4)))
    feed_messages(assembler, [stream_abort(600, 601)])
    feed_messages(assembler, [stream_abort(600, 603), stream_abort(600, 602)])
    (txn,) = feed_messages(assembler, [stream_commit(600, 0x900)])
    assert ids(assembler.replay(txn)) == [1]


def test_abort_of_an_empty_subtransaction_changes_nothing():
    assembler = new_assembler()
    feed_messages(assembler, streamed(600, (600, 1)))
    (aborted,) = feed_messages(assembler, [stream_abort(600, 699)])
    assert aborted.subxid == 699
    (txn,) = feed_messages(assembler, [stream_commit(600, 0x900)])
    assert ids(assembler.replay(txn)) == [1]


def test_stream_abort_of_the_top_level_transaction_drops_everything():
    assembler = new_assembler()
    feed_messages(assembler, streamed(600, (600, 1), (601, 2)))
    (aborted,) = feed_messages(assembler, [stream_abort(600, 600)])
    assert (aborted.xid, aborted.subxid) == (600, 600)
    assert assembler.open_streamed_transactions == 0
    assert assembler.idle


def test_stream_abort_of_a_transaction_never_streamed_here_is_harmless():
    assembler = new_assembler()
    (aborted,) = feed_messages(assembler, [stream_abort(4242, 4242)])
    assert aborted.xid == 4242
    assert assembler.state is AssemblerState.IDLE


# ------------------------------------------------------------------- 019 ddl abort (F5)


def test_schema_change_in_an_aborted_subtransaction_never_reaches_the_cache():
    assembler = new_assembler()
    wide = (*COLUMNS, ("extra", INT4_OID))
    feed_messages(
        assembler,
        [
            stream_start(700, first_segment=True),
            t_relation(700),
            insert(T, "1", "a", xid=700),
            t_relation(701, columns=wide),  # ALTER TABLE ADD COLUMN in a savepoint
            insert(T, "2", "b", "7", xid=701),
            StreamStop(),
            stream_abort(700, 701),
            stream_start(700, first_segment=False),
            t_relation(700),  # pgoutput sends the schema again after an abort
            insert(T, "3", "c", xid=700),
            StreamStop(),
        ],
    )
    (txn,) = feed_messages(assembler, [stream_commit(700, 0x900)])
    changes = list(assembler.replay(txn))
    assert ids(changes) == [1, 3]
    assert all(len(c.relation.columns) == 2 for c in changes)
    cached = assembler.relations.relation(T)
    assert cached is not None
    assert [c.name for c in cached.columns] == ["id", "note"]
    assert cached.xid is None


def test_schema_of_an_aborted_streamed_transaction_is_dropped_with_it():
    assembler = new_assembler()
    wide = (*COLUMNS, ("extra", INT4_OID))
    (txn1,) = feed_messages(assembler, plain_txn(1, 0x100, 1))
    feed_messages(
        assembler,
        [
            stream_start(700, first_segment=True),
            t_relation(700, columns=wide),
            insert(T, "2", "b", "7", xid=700),
            StreamStop(),
            stream_abort(700, 700),
        ],
    )
    (txn2,) = feed_messages(assembler, plain_txn(2, 0x300, 3, with_relation=False))
    list(assembler.replay(txn1))
    changes = list(assembler.replay(txn2))
    assert [len(c.relation.columns) for c in changes] == [2]


def test_schema_applies_in_commit_order_even_when_replay_lags_behind_feed():
    assembler = new_assembler()
    wide = (*COLUMNS, ("extra", INT4_OID))
    (txn1,) = feed_messages(assembler, plain_txn(1, 0x100, 1))
    (txn2,) = feed_messages(
        assembler,
        [begin(2, 0x200), relation(T, "t", wide), insert(T, "2", "b", "9"), commit(0x200)],
        start_lsn=0x2000,
    )
    first = list(assembler.replay(txn1))
    second = list(assembler.replay(txn2))
    assert [len(c.relation.columns) for c in first + second] == [2, 3]


# ----------------------------------------------------------------- 021/023 two-phase


def test_prepared_transaction_is_held_until_commit_prepared():
    assembler = new_assembler()
    outputs = feed_messages(
        assembler,
        [
            begin_prepare(800, "g1", 0x500),
            t_relation(),
            insert(T, "1"),
            prepare(800, "g1", 0x500),
        ],
    )
    assert outputs == [
        TransactionPrepared(xid=800, gid="g1", prepare_lsn=0x500, end_lsn=0x508, prepare_time=0)
    ]
    assert assembler.prepared_transactions == 1
    assert assembler.idle  # prepared transactions are tracked by the caller
    (txn,) = feed_messages(assembler, [commit_prepared(800, "g1", 0x900)])
    assert (txn.kind, txn.gid, txn.xid, txn.commit_lsn, txn.end_lsn) == (
        "commit_prepared",
        "g1",
        800,
        0x900,
        0x908,
    )
    assert ids(assembler.replay(txn)) == [1]
    assert assembler.prepared_transactions == 0


def test_rollback_prepared_drops_the_held_transaction():
    assembler = new_assembler()
    feed_messages(
        assembler,
        [begin_prepare(800, "g1", 0x500), t_relation(), insert(T, "1"), prepare(800, "g1", 0x500)],
    )
    (rolled_back,) = feed_messages(assembler, [rollback_prepared(800, "g1", 0x508, 0x900)])
    assert rolled_back == TransactionRolledBack(
        gid="g1", prepare_end_lsn=0x508, rollback_end_lsn=0x900, rollback_time=0
    )
    assert assembler.prepared_transactions == 0


def test_rollback_prepared_of_an_unknown_gid_is_harmless():
    # The server sends it for a transaction prepared before two-phase decoding was enabled.
    assembler = new_assembler()
    (rolled_back,) = feed_messages(assembler, [rollback_prepared(800, "never", 0x508, 0x900)])
    assert rolled_back.gid == "never"
    assert assembler.state is AssemblerState.IDLE


def test_commit_prepared_of_an_unknown_gid_is_a_sequence_error():
    assembler = new_assembler()
    with pytest.raises(ProtocolSequenceError, match="whose PREPARE this stream did not send"):
        feed_messages(assembler, [commit_prepared(800, "never", 0x900)])
    assert assembler.state is AssemblerState.ERROR


def test_commit_prepared_by_another_xid_is_a_sequence_error():
    assembler = new_assembler()
    feed_messages(
        assembler,
        [begin_prepare(800, "g1", 0x500), t_relation(), insert(T, "1"), prepare(800, "g1", 0x500)],
    )
    with pytest.raises(ProtocolSequenceError, match="prepared by transaction 800, not 801"):
        feed_messages(assembler, [commit_prepared(801, "g1", 0x900)])
    assert assembler.prepared_transactions == 1


def test_prepare_must_match_its_begin_prepare():
    assembler = new_assembler()
    with pytest.raises(ProtocolSequenceError, match="does not match its BEGIN PREPARE"):
        feed_messages(assembler, [begin_prepare(800, "g1", 0x500), prepare(800, "g2", 0x500)])


def test_a_gid_cannot_be_prepared_twice():
    assembler = new_assembler()
    feed_messages(assembler, [begin_prepare(800, "g1", 0x500), prepare(800, "g1", 0x500)])
    with pytest.raises(ProtocolSequenceError, match="already held"):
        feed_messages(assembler, [begin_prepare(801, "g1", 0x600)], start_lsn=0x2000)


def test_streamed_prepared_transaction_is_held_and_cannot_stream_again():
    assembler = new_assembler()
    feed_messages(assembler, streamed(900, (900, 1), (901, 2)))
    (prepared,) = feed_messages(assembler, [stream_prepare(900, "sg", 0x500)])
    assert isinstance(prepared, TransactionPrepared)
    assert assembler.open_streamed_transactions == 0
    assert assembler.prepared_transactions == 1
    with pytest.raises(ProtocolSequenceError, match="already prepared"):
        feed_messages(assembler, [stream_start(900, first_segment=False)])


def test_streamed_prepared_transaction_replays_after_commit_prepared():
    assembler = new_assembler()
    feed_messages(assembler, streamed(900, (900, 1), (901, 2)))
    feed_messages(assembler, [stream_abort(900, 901), stream_prepare(900, "sg", 0x500)])
    (txn,) = feed_messages(assembler, [commit_prepared(900, "sg", 0x900)])
    assert ids(assembler.replay(txn)) == [1]


def test_stream_abort_of_a_prepared_transaction_is_a_sequence_error():
    assembler = new_assembler()
    feed_messages(assembler, [*streamed(900, (900, 1)), stream_prepare(900, "sg", 0x500)])
    with pytest.raises(ProtocolSequenceError, match="only ROLLBACK PREPARED ends it"):
        feed_messages(assembler, [stream_abort(900, 900)])


def test_a_prepared_transactions_schema_serves_transactions_committed_before_it_resolves():
    # pgoutput marks the schema as sent when it sends it inside BEGIN PREPARE ... PREPARE,
    # so a transaction committed before the COMMIT PREPARED carries no RELATION message.
    assembler = new_assembler()
    feed_messages(
        assembler,
        [begin_prepare(800, "g1", 0x500), t_relation(), insert(T, "1"), prepare(800, "g1", 0x500)],
    )
    (other,) = feed_messages(
        assembler, plain_txn(801, 0x600, 2, with_relation=False), start_lsn=0x2000
    )
    assert ids(assembler.replay(other)) == [2]
    (held,) = feed_messages(assembler, [rollback_prepared(800, "g1", 0x508, 0x900)])
    assert isinstance(held, TransactionRolledBack)
    (later,) = feed_messages(
        assembler, plain_txn(802, 0xA00, 3, with_relation=False), start_lsn=0x3000
    )
    assert ids(assembler.replay(later)) == [3]


# --------------------------------------------------------------- sequencing failures


def test_insert_outside_a_transaction_is_a_sequence_error_with_the_frame_position():
    assembler = new_assembler()
    with pytest.raises(ProtocolSequenceError) as info:
        assembler.feed(0x16B374D848, encode_message(insert(T, "1"), OPTIONS))
    assert info.value.wal_start == 0x16B374D848
    assert "(WAL 16/B374D848)" in str(info.value)


def test_commit_whose_lsn_differs_from_begin_final_lsn_is_rejected():
    assembler = new_assembler()
    with pytest.raises(ProtocolSequenceError, match="differs from the BEGIN's final LSN"):
        feed_messages(assembler, [begin(1, 0x100), commit(0x200)])


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        ([stream_start(5, first_segment=False)], "whose first segment this stream did not send"),
        (
            [stream_start(5, first_segment=True), StreamStop(), stream_start(5, True)],
            "which is already streaming",
        ),
        ([stream_commit(5, 0x100)], "which this stream did not start"),
        ([stream_prepare(5, "g", 0x100)], "which this stream did not start"),
    ],
)
def test_stream_messages_for_unknown_or_reopened_transactions_are_rejected(messages, reason):
    assembler = new_assembler()
    with pytest.raises(ProtocolSequenceError, match=reason):
        feed_messages(assembler, messages)
    assert assembler.state is AssemblerState.ERROR


def test_malformed_bytes_get_the_frame_position_and_stop_the_assembler():
    assembler = new_assembler()
    with pytest.raises(MalformedMessageError) as info:
        assembler.feed(0x1234, b"I\x00")
    assert info.value.wal_start == 0x1234
    assert assembler.state is AssemblerState.ERROR


# ------------------------------------------------------------------------ replay contract


def test_replay_must_follow_commit_order_and_happen_once():
    assembler = new_assembler()
    (txn1,) = feed_messages(assembler, plain_txn(1, 0x100, 1))
    (txn2,) = feed_messages(assembler, plain_txn(2, 0x200, 2), start_lsn=0x2000)
    with pytest.raises(ProtocolSequenceError, match="not the next one to replay"):
        assembler.replay(txn2)
    assert ids(assembler.replay(txn1)) == [1]
    with pytest.raises(ProtocolSequenceError, match="not the next one to replay"):
        assembler.replay(txn1)
    assert ids(assembler.replay(txn2)) == [2]


def test_a_replay_must_be_finished_before_the_next_one_starts():
    assembler = new_assembler()
    (txn1,) = feed_messages(assembler, plain_txn(1, 0x100, 1, 2))
    (txn2,) = feed_messages(assembler, plain_txn(2, 0x200, 3), start_lsn=0x2000)
    changes = assembler.replay(txn1)
    next(changes)
    with pytest.raises(ProtocolSequenceError, match="unfinished"):
        assembler.replay(txn2)
    changes.close()
    assert ids(assembler.replay(txn2)) == [3]


def test_closing_a_replay_early_still_applies_the_rest_of_its_schema():
    assembler = new_assembler()
    wide = (*COLUMNS, ("extra", INT4_OID))
    (txn1,) = feed_messages(
        assembler,
        [
            begin(1, 0x100),
            t_relation(),
            insert(T, "1", "a"),
            relation(T, "t", wide),
            insert(T, "2", "b", "5"),
            commit(0x100),
        ],
    )
    (txn2,) = feed_messages(
        assembler, plain_txn(2, 0x200, 3, with_relation=False), start_lsn=0x2000
    )
    changes = assembler.replay(txn1)
    next(changes)
    changes.close()
    (change,) = list(assembler.replay(txn2))
    assert len(change.relation.columns) == 3


def test_discard_skips_the_changes_but_keeps_the_schema():
    assembler = new_assembler()
    (txn1,) = feed_messages(assembler, plain_txn(1, 0x100, 1))
    (txn2,) = feed_messages(
        assembler, plain_txn(2, 0x200, 2, with_relation=False), start_lsn=0x2000
    )
    assembler.discard(txn1)
    assert ids(assembler.replay(txn2)) == [2]


def test_change_for_an_unknown_relation_names_the_relation_id():
    assembler = new_assembler()
    (txn,) = feed_messages(assembler, [begin(1, 0x100), insert(4711, "1"), commit(0x100)])
    with pytest.raises(ProtocolSequenceError, match="relation 4711 is unknown") as info:
        list(assembler.replay(txn))
    assert info.value.message_type == "INSERT"
    assert info.value.xid == 1
    assert assembler.state is AssemblerState.ERROR


def test_truncate_and_update_changes_carry_their_relations_and_old_tuples():
    assembler = new_assembler()
    old = TupleData((ColumnValue(ColumnKind.TEXT, b"1"), ColumnValue(ColumnKind.NULL)))
    new = TupleData((ColumnValue(ColumnKind.TEXT, b"2"), ColumnValue(ColumnKind.UNCHANGED_TOAST)))
    (txn,) = feed_messages(
        assembler,
        [
            begin(1, 0x100, commit_time=5),
            Origin(origin_lsn=0x77, name="node_b"),
            t_relation(),
            Update(xid=None, relation_id=T, old_kind="K", old_tuple=old, new_tuple=new),
            Truncate(xid=None, options=3, relation_ids=(T,)),
            commit(0x100, commit_time=5),
        ],
    )
    assert (txn.origin, txn.origin_lsn) == ("node_b", 0x77)
    update, truncate = list(assembler.replay(txn))
    assert isinstance(update, RowChange)
    assert (update.op, update.old_kind, update.old, update.new) == ("update", "K", old, new)
    assert decode_tuple(update.relation, new) == (2, UNCHANGED_TOAST)
    assert isinstance(truncate, TruncateChange)
    assert [r.relation_id for r in truncate.relations] == [T]
    assert (truncate.cascade, truncate.restart_identity, truncate.ordinal) == (True, True, 1)


def test_errors_are_decode_errors_that_survive_pickling():
    import pickle

    error = ProtocolSequenceError("x", offset=3, message_type="INSERT", wal_start=5, xid=9)
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, DecodeError)
    assert (copy.offset, copy.message_type, copy.wal_start, copy.xid) == (3, "INSERT", 5, 9)
    assert str(copy) == str(error)


def test_replay_committed_helper_replays_every_transaction_in_order():
    assembler = new_assembler()
    outputs = feed_messages(
        assembler, [*plain_txn(1, 0x100, 1), *plain_txn(2, 0x200, 2, with_relation=False)]
    )
    assert ids(replay_committed(assembler, outputs)) == [1, 2]
