"""Every pgoutput payload recorded from PostgreSQL 15 and 18 parses into the right fields.

The fixtures come from ``tests/golden/harvest.py`` (see its docstring for the workloads and
option sets); no server is needed here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from decoder import (
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    LogicalMessage,
    Message,
    Origin,
    Prepare,
    Relation,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
    message_type_name,
    parse_lsn,
    parse_message,
)
from tests.golden import Capture, capture, load_captures

CAPTURES = load_captures()


def parsed(found: Capture) -> Iterator[tuple[Message, int]]:
    """Parse a capture's messages in order, tracking stream blocks; yields (message, xid)."""
    in_stream = False
    for golden in found.messages:
        message = parse_message(golden.payload, options=found.options, in_stream=in_stream)
        if isinstance(message, StreamStart):
            in_stream = True
        elif isinstance(message, StreamStop):
            in_stream = False
        yield message, golden.xid


HIGHEST_PROTOCOL = {14: 2, 15: 3, 16: 4, 17: 4, 18: 4}


def test_fixtures_exist_for_every_server_and_every_protocol_version_it_speaks():
    seen = {(found.server_major, found.options.proto_version) for found in CAPTURES}
    expected = {
        (major, version)
        for major, highest in HIGHEST_PROTOCOL.items()
        for version in range(1, highest + 1)
    }
    assert expected <= seen


@pytest.mark.parametrize("found", CAPTURES, ids=lambda found: found.id)
def test_every_golden_payload_parses_as_the_message_its_tag_names(found):
    for (message, _), golden in zip(parsed(found), found.messages, strict=True):
        assert message_type_name(golden.payload[0]) != "UNKNOWN"
        assert type(message).__name__ in {
            "Begin",
            "Commit",
            "Origin",
            "Relation",
            "Type",
            "Insert",
            "Update",
            "Delete",
            "Truncate",
            "LogicalMessage",
            "BeginPrepare",
            "Prepare",
            "CommitPrepared",
            "RollbackPrepared",
            "StreamStart",
            "StreamStop",
            "StreamCommit",
            "StreamAbort",
            "StreamPrepare",
        }


# Each protocol version's captures hold every message that version introduced (protocol 4
# changes only the STREAM ABORT layout, so it must show all stream and two-phase messages);
# together a server's captures hold all 19.
_STREAM = {StreamStart, StreamStop, StreamCommit, StreamAbort}
_TWO_PHASE = {BeginPrepare, Prepare, CommitPrepared, RollbackPrepared, StreamPrepare}
EXPECTED_COVERAGE = {
    1: {Begin, Commit, Origin, Relation, Type, Insert, Update, Delete, Truncate, LogicalMessage},
    2: _STREAM,
    3: _TWO_PHASE,
    4: _STREAM | _TWO_PHASE,
}


@pytest.mark.parametrize("major", sorted(HIGHEST_PROTOCOL))
def test_golden_bytes_cover_every_message_type_of_each_protocol_version(major):
    by_version: dict[int, set[type]] = {}
    for found in CAPTURES:
        if found.server_major != major:
            continue
        kinds = by_version.setdefault(found.options.proto_version, set())
        kinds.update(type(message) for message, _ in parsed(found))
    for version, expected in EXPECTED_COVERAGE.items():
        if version > HIGHEST_PROTOCOL[major]:
            continue  # protocol 3 needs PostgreSQL 15, protocol 4 PostgreSQL 16
        assert expected <= by_version[version], f"protocol {version} on PostgreSQL {major}"
    every = set().union(*by_version.values())
    # PostgreSQL 14 has no two-phase decoding: the 14 others.
    assert len(every) == (19 if major >= 15 else 19 - len(_TWO_PHASE))


@pytest.mark.parametrize("found", CAPTURES, ids=lambda found: found.id)
def test_golden_lsns_are_consistent_within_each_transaction(found):
    begin: Begin | None = None
    for message, _ in parsed(found):
        match message:
            case Begin():
                begin = message
            case Commit():
                assert begin is not None
                assert message.commit_lsn == begin.final_lsn
                assert message.commit_lsn < message.end_lsn
                assert message.commit_time == begin.commit_time
            case StreamCommit() | CommitPrepared():
                assert 0 < message.commit_lsn < message.end_lsn
            case BeginPrepare() | Prepare() | StreamPrepare():
                assert 0 < message.prepare_lsn < message.end_lsn
            case RollbackPrepared():
                assert 0 < message.prepare_end_lsn < message.rollback_end_lsn
            case _:
                pass


@pytest.mark.parametrize("found", CAPTURES, ids=lambda found: found.id)
def test_streamed_messages_carry_the_top_level_xid_or_a_later_subxid(found):
    top: int | None = None
    for message, reported_xid in parsed(found):
        if isinstance(message, StreamStart):
            top = message.xid
            assert message.xid == reported_xid
        elif isinstance(message, StreamStop):
            top = None
        elif isinstance(message, Relation | Type | Insert | Update | Delete | Truncate):
            if top is None:
                assert message.xid is None
            else:
                assert message.xid is not None
                assert message.xid >= top


def _relations(found: Capture) -> dict[str, Relation]:
    return {m.relation_name: m for m, _ in parsed(found) if isinstance(m, Relation)}


@pytest.mark.parametrize(
    "found",
    [c for c in CAPTURES if c.workload == "dml"],
    ids=lambda found: found.id,
)
def test_relation_messages_describe_the_published_tables(found):
    relations = _relations(found)
    typed = relations["typed"]
    assert typed.namespace == "public"
    assert typed.replica_identity == "d"
    assert [c.name for c in typed.columns] == [
        "id",
        "name",
        "amount",
        "at",
        "doc",
        "span",
        "raw",
        "flag",
        "ratio",
        "tags",
        "uid",
        "day",
        "feeling",
    ]
    assert [c.name for c in typed.key_columns] == ["id"]
    assert [c.type_oid for c in typed.columns[:12]] == [
        23,  # int4
        25,  # text
        1700,  # numeric
        1184,  # timestamptz
        3802,  # jsonb
        1186,  # interval
        17,  # bytea
        16,  # bool
        701,  # float8
        1016,  # int8[]
        2950,  # uuid
        1082,  # date
    ]
    # numeric(10, 2) has the type modifier ((10 << 16) | 2) + 4.
    assert typed.columns[2].type_modifier == (10 << 16 | 2) + 4
    assert relations["full_ident"].replica_identity == "f"
    # REPLICA IDENTITY FULL flags every column as part of the key.
    assert [c.name for c in relations["full_ident"].key_columns] == ["id", "note"]
    mood = [m for m, _ in parsed(found) if isinstance(m, Type)]
    # Streamed transactions carry the type again, each one (maybe_send_schema).
    assert {(t.namespace, t.type_name) for t in mood} == {("public", "mood")}
    assert mood[0].type_oid == typed.columns[12].type_oid


@pytest.mark.parametrize(
    "found",
    [c for c in CAPTURES if c.workload == "dml"],
    ids=lambda found: found.id,
)
def test_golden_row_messages_have_the_expected_tuple_shapes(found):
    messages = [m for m, _ in parsed(found)]
    updates = [m for m in messages if isinstance(m, Update)]
    deletes = [m for m in messages if isinstance(m, Delete)]
    truncates = [m for m in messages if isinstance(m, Truncate)]
    assert [u.old_kind for u in updates] == [None, "K", "O", None]
    assert [d.old_kind for d in deletes] == ["K", "O"]
    toast_update = updates[-1]
    assert [v.kind.value for v in toast_update.new_tuple.values] == [
        "b" if found.options.binary else "t",
        "b" if found.options.binary else "t",
        "u",
    ]
    assert len(truncates) == 1
    assert truncates[0].cascade
    assert truncates[0].restart_identity
    assert len(truncates[0].relation_ids) == 2


def test_stream_abort_carries_abort_lsn_and_time_exactly_with_parallel_streaming():
    for found in CAPTURES:
        for message, _ in parsed(found):
            if isinstance(message, StreamAbort):
                if found.options.streaming == "parallel":
                    assert message.abort_lsn is not None
                    assert message.abort_lsn > 0
                    assert message.abort_time is not None
                    assert message.abort_time > 0
                else:
                    assert message.abort_lsn is None
                    assert message.abort_time is None


@pytest.mark.parametrize(
    ("major", "option_set", "origin_lsn"),
    [
        (14, "v1-text", parse_lsn("0/ABCDEF")),
        (15, "v1-text", parse_lsn("0/ABCDEF")),
        (16, "v4-parallel-twophase", 0),
        (17, "v1-binary", parse_lsn("0/ABCDEF")),
        (18, "v1-binary", parse_lsn("0/ABCDEF")),
        (18, "v4-parallel-twophase", 0),  # streamed: pgoutput sends InvalidXLogRecPtr
    ],
)
def test_origin_message_names_the_replication_origin(major, option_set, origin_lsn):
    origins = [m for m, _ in parsed(capture(major, option_set, "origin")) if isinstance(m, Origin)]
    assert [(o.name, o.origin_lsn) for o in origins] == [("golden_origin", origin_lsn)]


@pytest.mark.parametrize("found", [c for c in CAPTURES if c.workload == "messages"], ids=str)
def test_logical_messages_keep_prefix_content_and_transactional_flag(found):
    messages = [m for m, _ in parsed(found) if isinstance(m, LogicalMessage)]
    assert [(m.transactional, m.prefix, m.content) for m in messages] == [
        (False, "golden", b"outside"),
        (True, "golden", b"inside"),
    ]
    assert all(m.lsn > 0 for m in messages)
