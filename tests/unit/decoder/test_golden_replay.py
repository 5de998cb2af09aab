"""Real server streams through the assembler: what replays is exactly what committed.

Each capture is fed to a fresh ``Assembler``; the committed transactions are replayed and
their rows decoded with ``ValueDecoder.decode_tuple``. Text and binary captures, PostgreSQL
15 and 18, streamed and not, must all give the same values.
"""

from __future__ import annotations

import datetime
import uuid
from decimal import Decimal

import pytest

from decoder import (
    UNCHANGED_TOAST,
    Assembler,
    AssemblerOutput,
    Change,
    CommittedTransaction,
    EnumType,
    MessageChange,
    NonTransactionalMessage,
    RowChange,
    StreamAborted,
    TransactionPrepared,
    TransactionRolledBack,
    TruncateChange,
    UnknownBinaryFormatError,
    ValueDecoder,
)
from tests.golden import Capture, load_captures

CAPTURES = load_captures()


def run(found: Capture) -> tuple[list[AssemblerOutput], list[tuple[CommittedTransaction, list]]]:
    """Feed a capture; return every output and each committed transaction's changes."""
    assembler = Assembler(found.options)
    outputs: list[AssemblerOutput] = []
    replayed: list[tuple[CommittedTransaction, list[Change]]] = []
    for golden in found.messages:
        for output in assembler.feed(golden.lsn, golden.payload):
            outputs.append(output)
            if isinstance(output, CommittedTransaction):
                replayed.append((output, list(assembler.replay(output))))
    assert assembler.idle
    assert assembler.open_streamed_transactions == 0
    return outputs, replayed


def harvest_types(type_oid: int) -> EnumType:
    """The catalog of the harvest database (tests/golden/harvest.py) for user types: its
    only one is the enum ``mood``."""
    return EnumType(type_oid, "public", "mood")


def rows(found: Capture) -> list[tuple[str, str, str | None, object, object]]:
    """(table, op, old_kind, old values, new values) of every replayed row change."""
    decoder = ValueDecoder(harvest_types)
    result = []
    for _, changes in run(found)[1]:
        for change in changes:
            if isinstance(change, RowChange):
                old = decoder.decode_tuple(change.relation, change.old) if change.old else None
                new = decoder.decode_tuple(change.relation, change.new) if change.new else None
                result.append((change.relation.relation_name, change.op, change.old_kind, old, new))
    return result


def by_workload(name: str) -> list[Capture]:
    return [found for found in CAPTURES if found.workload == name]


@pytest.mark.parametrize("found", CAPTURES, ids=lambda found: found.id)
def test_committed_transactions_report_consistent_positions_counts_and_ordinals(found):
    _, replayed = run(found)
    for txn, changes in replayed:
        assert 0 < txn.commit_lsn < txn.end_lsn
        assert txn.commit_time > 0
        assert txn.change_count == len(changes)
        assert [change.ordinal for change in changes] == list(range(len(changes)))
        for change in changes:
            assert change.commit_lsn == txn.commit_lsn
            assert change.commit_time == txn.commit_time
    commit_lsns = [txn.commit_lsn for txn, _ in replayed]
    assert commit_lsns == sorted(commit_lsns)


FIRST_ROW = (
    1,
    "alpha",
    Decimal("12.50"),
    datetime.datetime(2024, 2, 29, 13, 14, 15, 123456, tzinfo=datetime.UTC),
    '{"a": null, "b": [1, 2]}',
    "1 year 2 mons 3 days 04:05:06.5",
    b"\x00\xff\x10",
    True,
    1.5,
    [1, -2, 3],
    uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    datetime.date(2024, 1, 31),
    "happy",
)
NULLS = (None,) * 11


@pytest.mark.parametrize("found", by_workload("dml"), ids=lambda found: found.id)
def test_dml_workload_replays_every_row_with_its_values(found):
    # The enum is its label in both modes (binary mode through its catalog description).
    first = FIRST_ROW
    renamed = (1, "beta", *first[2:])
    big = "0123456789abcdef" * 250
    second_span = "-1 mons +1 day -00:00:01.5"
    assert rows(found) == [
        ("typed", "insert", None, None, first),
        ("typed", "insert", None, None, (2, None, None, None, None, second_span, *NULLS[:7])),
        ("typed", "update", None, None, renamed),
        (
            "typed",
            "update",
            "K",
            (2, *NULLS, None),
            (3, None, None, None, None, second_span, *NULLS[:7]),
        ),
        ("typed", "delete", "K", (3, *NULLS, None), None),
        ("full_ident", "insert", None, None, (1, "one")),
        ("full_ident", "insert", None, None, (2, "two")),
        ("full_ident", "update", "O", (1, "one"), (1, "uno")),
        ("full_ident", "delete", "O", (2, "two"), None),
        ("toasty", "insert", None, None, (1, 0, big)),
        ("toasty", "update", None, None, (1, 1, UNCHANGED_TOAST)),
    ]
    truncates = [
        change
        for _, changes in run(found)[1]
        for change in changes
        if isinstance(change, TruncateChange)
    ]
    assert len(truncates) == 1
    assert {r.relation_name for r in truncates[0].relations} == {"plain", "full_ident"}
    assert truncates[0].cascade
    assert truncates[0].restart_identity


@pytest.mark.parametrize(
    "found", [f for f in by_workload("dml") if f.options.binary], ids=lambda found: found.id
)
def test_a_binary_user_type_without_a_description_is_named_not_called_damaged(found):
    insert = next(
        change
        for _, changes in run(found)[1]
        for change in changes
        if isinstance(change, RowChange) and change.relation.relation_name == "typed"
    )
    assert insert.new is not None
    with pytest.raises(UnknownBinaryFormatError, match=r"type OID \d+.*no source catalog"):
        ValueDecoder().decode_tuple(insert.relation, insert.new)


def _plain_ids(found: Capture) -> list[int]:
    return [new[0] for table, op, _, _, new in rows(found) if table == "plain" and op == "insert"]


@pytest.mark.parametrize("found", by_workload("subxact_abort"), ids=lambda found: found.id)
def test_rolled_back_savepoint_rows_never_replay(found):
    assert _plain_ids(found) == [20, 22, 23]


@pytest.mark.parametrize("found", by_workload("ddl_in_aborted_subxact"), ids=lambda found: found.id)
def test_schema_change_in_an_aborted_subtransaction_never_reaches_the_relation_cache(found):
    assert _plain_ids(found) == [30, 32]
    for _, changes in run(found)[1]:
        for change in changes:
            assert isinstance(change, RowChange)
            assert [c.name for c in change.relation.columns] == ["id", "note"]


@pytest.mark.parametrize("found", by_workload("aborted"), ids=lambda found: found.id)
def test_an_aborted_transaction_releases_nothing(found):
    # The server reads only flushed WAL and an abort record is not flushed at once, so a
    # streamed transaction's STREAM ABORT shows up in the next workload's capture.
    _, replayed = run(found)
    assert replayed == []


@pytest.mark.parametrize("found", by_workload("two_phase"), ids=lambda found: found.id)
def test_only_the_committed_prepared_transaction_replays(found):
    outputs, replayed = run(found)
    assert _plain_ids(found) == [50]
    prepared = [o for o in outputs if isinstance(o, TransactionPrepared)]
    rolled_back = [o for o in outputs if isinstance(o, TransactionRolledBack)]
    if found.options.two_phase:
        assert [p.gid for p in prepared] == ["golden_commit", "golden_rollback"]
        assert [r.gid for r in rolled_back] == ["golden_rollback"]
        assert [(t.kind, t.gid) for t, _ in replayed] == [("commit_prepared", "golden_commit")]
        assert rolled_back[0].prepare_end_lsn == prepared[1].end_lsn
    else:
        # Without two-phase decoding the server decodes the transactions at COMMIT PREPARED
        # and ROLLBACK PREPARED time, as ordinary (possibly streamed) transactions.
        assert prepared == []
        assert rolled_back == []
        assert [t.gid for t, _ in replayed] == [None]


@pytest.mark.parametrize("found", by_workload("origin"), ids=lambda found: found.id)
def test_origin_is_reported_on_the_committed_transaction(found):
    _, replayed = run(found)
    if found.server_major == 14:
        # pgoutput sends empty transactions before PostgreSQL 15: here the one of
        # pg_replication_origin_create, without an origin and without changes.
        empty, *replayed = replayed
        assert empty[0].origin is None
        assert empty[1] == []
    assert len(replayed) == 1
    txn = replayed[0][0]
    assert txn.origin == "golden_origin"
    assert txn.origin_lsn == (0 if txn.kind == "stream_commit" else 0xABCDEF)


@pytest.mark.parametrize("found", by_workload("messages"), ids=lambda found: found.id)
def test_messages_come_out_immediately_or_with_their_transaction(found):
    outputs, replayed = run(found)
    outside = [o for o in outputs if isinstance(o, NonTransactionalMessage)]
    assert [(o.prefix, o.content) for o in outside] == [("golden", b"outside")]
    inside = [c for _, changes in replayed for c in changes if isinstance(c, MessageChange)]
    assert [(c.prefix, c.content, c.transactional) for c in inside] == [("golden", b"inside", True)]
    assert inside[0].ordinal == 1  # after the INSERT of the same transaction


@pytest.mark.parametrize("found", by_workload("large"), ids=lambda found: found.id)
def test_large_streamed_transaction_keeps_all_but_its_aborted_subtransaction(found):
    outputs, replayed = run(found)
    assert _plain_ids(found) == [*range(1000, 1400), 1400]
    kind = "commit_prepared" if found.options.two_phase else "stream_commit"
    assert [t.kind for t, _ in replayed] == [kind]
    aborts = [o for o in outputs if isinstance(o, StreamAborted)]
    assert len(aborts) == 1
    assert aborts[0].subxid != aborts[0].xid


def test_text_and_binary_captures_and_both_servers_decode_to_the_same_rows():
    def normalized(found: Capture) -> list:
        return [
            tuple(
                tuple(b"happy" if value == "happy" else value for value in part)
                if isinstance(part, tuple)
                else part
                for part in row
            )
            for row in rows(found)
        ]

    reference = normalized(by_workload("dml")[0])
    for found in by_workload("dml")[1:]:
        assert normalized(found) == reference, found.id
