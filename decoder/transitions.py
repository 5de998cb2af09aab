"""The assembler's state machine as data: its states, its events and every legal transition.

Theory of operation (h11 ``_state.py``): a state is where the assembler is in the message
flow; an event is what a message is (``message_event``); ``TRANSITIONS`` lists every legal
(state, event) pair and the state it leads to. The assembler looks the pair up before it
changes anything, and any pair that is not listed is a ``ProtocolSequenceError``. Open
transactions are data, not states: several streamed transactions can be open at once.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from decoder.messages import (
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
)


class AssemblerState(enum.Enum):
    """Where the assembler is in the message flow (listed in ``decoder.assembler``)."""

    IDLE = "IDLE"
    IN_TRANSACTION = "IN_TRANSACTION"
    IN_PREPARED_TRANSACTION = "IN_PREPARED_TRANSACTION"
    IN_STREAM_BLOCK = "IN_STREAM_BLOCK"
    ERROR = "ERROR"


# Events are the message type names of ``logicalrep_message_type``, except that MESSAGE is
# split by its transactional flag: the two kinds are legal in different states.
NON_TRANSACTIONAL_MESSAGE: Final = "MESSAGE (non-transactional)"

_EVENT_BY_CLASS: Final[Mapping[type, str]] = {
    Begin: "BEGIN",
    Commit: "COMMIT",
    Origin: "ORIGIN",
    Relation: "RELATION",
    Type: "TYPE",
    Insert: "INSERT",
    Update: "UPDATE",
    Delete: "DELETE",
    Truncate: "TRUNCATE",
    LogicalMessage: "MESSAGE",
    BeginPrepare: "BEGIN PREPARE",
    Prepare: "PREPARE",
    CommitPrepared: "COMMIT PREPARED",
    RollbackPrepared: "ROLLBACK PREPARED",
    StreamStart: "STREAM START",
    StreamStop: "STREAM STOP",
    StreamCommit: "STREAM COMMIT",
    StreamAbort: "STREAM ABORT",
    StreamPrepare: "STREAM PREPARE",
}

EVENTS: Final = (*_EVENT_BY_CLASS.values(), NON_TRANSACTIONAL_MESSAGE)

# What may appear inside a transaction, a prepared transaction and a stream block alike.
_CONTENT_EVENTS: Final = (
    "ORIGIN",
    "RELATION",
    "TYPE",
    "INSERT",
    "UPDATE",
    "DELETE",
    "TRUNCATE",
    "MESSAGE",
)

_S = AssemblerState
TRANSITIONS: Final[Mapping[tuple[AssemblerState, str], AssemblerState]] = {
    (_S.IDLE, "BEGIN"): _S.IN_TRANSACTION,
    (_S.IDLE, "BEGIN PREPARE"): _S.IN_PREPARED_TRANSACTION,
    (_S.IDLE, "STREAM START"): _S.IN_STREAM_BLOCK,
    (_S.IDLE, "STREAM COMMIT"): _S.IDLE,
    (_S.IDLE, "STREAM ABORT"): _S.IDLE,
    (_S.IDLE, "STREAM PREPARE"): _S.IDLE,
    (_S.IDLE, "COMMIT PREPARED"): _S.IDLE,
    (_S.IDLE, "ROLLBACK PREPARED"): _S.IDLE,
    (_S.IDLE, NON_TRANSACTIONAL_MESSAGE): _S.IDLE,
    **{(_S.IN_TRANSACTION, event): _S.IN_TRANSACTION for event in _CONTENT_EVENTS},
    (_S.IN_TRANSACTION, "COMMIT"): _S.IDLE,
    **{
        (_S.IN_PREPARED_TRANSACTION, event): _S.IN_PREPARED_TRANSACTION for event in _CONTENT_EVENTS
    },
    (_S.IN_PREPARED_TRANSACTION, "PREPARE"): _S.IDLE,
    **{(_S.IN_STREAM_BLOCK, event): _S.IN_STREAM_BLOCK for event in _CONTENT_EVENTS},
    (_S.IN_STREAM_BLOCK, "STREAM STOP"): _S.IDLE,
}
"""Every legal (state, event) pair and the state it leads to; anything else is an error."""


# Events that need an option negotiated at START_REPLICATION (Assembler._check_negotiated).
STREAM_EVENTS: Final = frozenset(
    {"STREAM START", "STREAM STOP", "STREAM COMMIT", "STREAM ABORT", "STREAM PREPARE"}
)
MESSAGE_EVENTS: Final = frozenset({"MESSAGE", NON_TRANSACTIONAL_MESSAGE})


def message_event(message: Message) -> str:
    """Return the event name of a message, the column key of ``TRANSITIONS``."""
    if isinstance(message, LogicalMessage) and not message.transactional:
        return NON_TRANSACTIONAL_MESSAGE
    return _EVENT_BY_CLASS[type(message)]
