"""Every (state, message) pair: legal ones reach the state TRANSITIONS names, illegal ones
raise, change nothing and leave the assembler refusing all further input.
"""

from __future__ import annotations

import pytest

from decoder import (
    EVENTS,
    TRANSITIONS,
    Assembler,
    AssemblerState,
    Delete,
    Message,
    Origin,
    ProtocolOptions,
    ProtocolSequenceError,
    StreamStop,
    Truncate,
    Type,
    Update,
    message_event,
)
from tests.support.pgoutput_builder import (
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
    rollback_prepared,
    stream_abort,
    stream_commit,
    stream_prepare,
    stream_start,
    text_tuple,
)

OPTIONS = ProtocolOptions(4, "parallel", two_phase=True, messages=True)
S = AssemblerState
LIVE_STATES = [S.IDLE, S.IN_TRANSACTION, S.IN_PREPARED_TRANSACTION, S.IN_STREAM_BLOCK]


def assembler_in(state: AssemblerState) -> Assembler:
    """An assembler in ``state``, holding an open streamed xid 900 and a prepared gid."""
    assembler = Assembler(OPTIONS)
    feed_messages(
        assembler,
        [
            stream_start(900, first_segment=True),
            relation(1, xid=900),
            insert(1, "1", xid=900),
            StreamStop(),
            begin_prepare(800, "held", 0x500),
            relation(1),
            insert(1, "2"),
            prepare(800, "held", 0x500),
        ],
    )
    setup = {
        S.IDLE: [],
        S.IN_TRANSACTION: [begin(700, 0x900)],
        S.IN_PREPARED_TRANSACTION: [begin_prepare(701, "new", 0x900)],
        S.IN_STREAM_BLOCK: [stream_start(900, first_segment=False)],
    }[state]
    feed_messages(assembler, setup, start_lsn=0x2000)
    assert assembler.state is state
    return assembler


def representative(event: str, state: AssemblerState) -> Message:
    """A message of ``event`` whose data fits the setup above, so only the state decides."""
    xid = 900 if state is S.IN_STREAM_BLOCK else None
    old = text_tuple("1")
    messages: dict[str, Message] = {
        "BEGIN": begin(702, 0x900),
        "COMMIT": commit(0x900),
        "ORIGIN": Origin(origin_lsn=0, name="elsewhere"),
        "RELATION": relation(1, xid=xid),
        "TYPE": Type(xid=xid, type_oid=16390, namespace="public", type_name="mood"),
        "INSERT": insert(1, "3", xid=xid),
        "UPDATE": Update(xid=xid, relation_id=1, old_kind="K", old_tuple=old, new_tuple=old),
        "DELETE": Delete(xid=xid, relation_id=1, old_kind="K", old_tuple=old),
        "TRUNCATE": Truncate(xid=xid, options=0, relation_ids=(1,)),
        "MESSAGE": logical_message("p", b"c", transactional=True, xid=xid),
        "MESSAGE (non-transactional)": logical_message("p", b"c", transactional=False, xid=xid),
        "BEGIN PREPARE": begin_prepare(703, "another", 0x900),
        "PREPARE": prepare(701, "new", 0x900),
        "COMMIT PREPARED": commit_prepared(800, "held", 0xA00),
        "ROLLBACK PREPARED": rollback_prepared(800, "held", 0x508, 0xA00),
        "STREAM START": stream_start(901, first_segment=True),
        "STREAM STOP": StreamStop(),
        "STREAM COMMIT": stream_commit(900, 0xA00),
        "STREAM ABORT": stream_abort(900, 900, abort_lsn=0xA00),
        "STREAM PREPARE": stream_prepare(900, "g9", 0xA00),
    }
    message = messages[event]
    assert message_event(message) == event
    return message


def snapshot(assembler: Assembler) -> tuple[int, int, int]:
    return (
        assembler.open_streamed_transactions,
        assembler.prepared_transactions,
        assembler.spilled_bytes,
    )


PAIRS = [(state, event) for state in LIVE_STATES for event in EVENTS]


@pytest.mark.parametrize(("state", "event"), PAIRS, ids=[f"{s.value}-{e}" for s, e in PAIRS])
def test_every_state_and_message_pair_follows_the_transition_table(state, event):
    assembler = assembler_in(state)
    payload = encode_message(representative(event, state), OPTIONS)
    expected = TRANSITIONS.get((state, event))
    if expected is not None:
        assembler.feed(0x3000, payload)
        assert assembler.state is expected
        return
    before = snapshot(assembler)
    with pytest.raises(ProtocolSequenceError) as info:
        assembler.feed(0x3000, payload)
    assert info.value.message_type == event
    assert info.value.wal_start == 0x3000
    assert f"not allowed in state {state.value}" in str(info.value)
    assert assembler.state is S.ERROR
    assert snapshot(assembler) == before
    with pytest.raises(ProtocolSequenceError, match="stopped at an earlier error"):
        assembler.feed(0x3010, encode_message(begin(1, 0x10), OPTIONS))


@pytest.mark.parametrize("event", EVENTS)
def test_the_error_state_refuses_every_message(event):
    assembler = assembler_in(S.IDLE)
    with pytest.raises(ProtocolSequenceError):
        assembler.feed(0x3000, encode_message(commit(0x10), OPTIONS))
    with pytest.raises(ProtocolSequenceError, match="stopped at an earlier error"):
        assembler.feed(0x3010, encode_message(representative(event, S.IDLE), OPTIONS))
    assert assembler.state is S.ERROR
    assert not assembler.idle


def test_the_table_is_the_one_the_style_guide_specifies():
    content = ["ORIGIN", "RELATION", "TYPE", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "MESSAGE"]
    expected = {
        (S.IDLE, "BEGIN"): S.IN_TRANSACTION,
        (S.IN_TRANSACTION, "COMMIT"): S.IDLE,
        (S.IDLE, "STREAM START"): S.IN_STREAM_BLOCK,
        (S.IN_STREAM_BLOCK, "STREAM STOP"): S.IDLE,
        (S.IDLE, "STREAM COMMIT"): S.IDLE,
        (S.IDLE, "STREAM ABORT"): S.IDLE,
        (S.IDLE, "STREAM PREPARE"): S.IDLE,
        (S.IDLE, "BEGIN PREPARE"): S.IN_PREPARED_TRANSACTION,
        (S.IN_PREPARED_TRANSACTION, "PREPARE"): S.IDLE,
        (S.IDLE, "COMMIT PREPARED"): S.IDLE,
        (S.IDLE, "ROLLBACK PREPARED"): S.IDLE,
        (S.IDLE, "MESSAGE (non-transactional)"): S.IDLE,
        **{(S.IN_TRANSACTION, e): S.IN_TRANSACTION for e in content},
        **{(S.IN_PREPARED_TRANSACTION, e): S.IN_PREPARED_TRANSACTION for e in content},
        **{(S.IN_STREAM_BLOCK, e): S.IN_STREAM_BLOCK for e in content},
    }
    assert dict(TRANSITIONS) == expected


@pytest.mark.parametrize(
    ("options", "message", "reason"),
    [
        (ProtocolOptions(2, "off"), stream_start(5, first_segment=True), "streaming is off"),
        (
            ProtocolOptions(4, "parallel"),
            logical_message("p", b"", transactional=False),
            "messages were not requested",
        ),
    ],
)
def test_messages_the_negotiated_options_rule_out_are_sequence_errors(options, message, reason):
    assembler = Assembler(options)
    with pytest.raises(ProtocolSequenceError, match=reason):
        assembler.feed(0x10, encode_message(message, options))
    assert assembler.state is S.ERROR


def test_two_phase_messages_are_accepted_without_the_two_phase_option():
    # A two-phase slot keeps sending prepared transactions (pgoutput_startup).
    options = ProtocolOptions(1)
    assembler = Assembler(options)
    feed_messages(
        assembler,
        [begin_prepare(5, "g", 0x100), relation(1), insert(1, "1"), prepare(5, "g", 0x100)],
    )
    assert assembler.prepared_transactions == 1
