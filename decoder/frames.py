"""CopyData frames of the streaming replication protocol, both directions.

Inside ``COPY BOTH`` the walsender sends XLogData (``w``) frames, whose payload is one
pgoutput message, and primary keepalives (``k``); the client answers with standby status
updates (``r``). See "Streaming Replication Protocol" in the PostgreSQL manual. Encoding
the reply is as pure as parsing: ``capture/`` only moves the bytes (h11's ``send() ->
bytes`` shape).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from decoder.errors import MalformedMessageError
from decoder.fastbuild import fast_constructor
from decoder.lsn import Lsn, PgTimestamp
from decoder.native import COMPILED
from decoder.wire import U64

_XLOG_HEADER: Final = struct.Struct(">QQq")
_KEEPALIVE: Final = struct.Struct(">QqB")
_STATUS_UPDATE: Final = struct.Struct(">cQQQqB")
_U64_MAX: Final = 2**64 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class XLogData:
    """A ``w`` frame: one pgoutput message and where it sits in the WAL."""

    wal_start: Lsn
    wal_end: Lsn
    send_time: PgTimestamp
    payload: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class PrimaryKeepalive:
    """A ``k`` frame: the server's current WAL end; maybe a request for an immediate reply."""

    wal_end: Lsn
    send_time: PgTimestamp
    reply_requested: bool


# One XLogData per received message: built without its constructor (decoder.fastbuild).
_new_xlog_data: Final[Callable[[int, int, int, bytes], XLogData]] = fast_constructor(XLogData)

_XLOG_PAYLOAD: Final = 1 + _XLOG_HEADER.size


def parse_copy_data(buf: bytes | memoryview) -> XLogData | PrimaryKeepalive:
    """Parse one CopyData payload received from the walsender.

    Args:
        buf: the CopyData payload, starting with its ``w`` or ``k`` tag.

    Returns:
        The frame; an XLogData payload is copied into ``bytes``.

    Raises:
        MalformedMessageError: unknown tag, short frame, or trailing bytes after a keepalive.
    """
    if len(buf) == 0:
        raise MalformedMessageError("empty CopyData frame", offset=0, message_type="COPY DATA")
    tag = buf[0]
    if tag == 0x77:  # 'w'
        if len(buf) < _XLOG_PAYLOAD:
            raise MalformedMessageError(
                f"XLogData header needs {_XLOG_HEADER.size} bytes but {len(buf) - 1} remain",
                offset=1,
                message_type="XLOGDATA",
            )
        # The NewType wrappers are identity functions, so the plain ints are already the
        # right values.
        wal_start, wal_end, send_time = _XLOG_HEADER.unpack_from(buf, 1)
        return _new_xlog_data(wal_start, wal_end, send_time, bytes(buf[_XLOG_PAYLOAD:]))
    if tag == 0x6B:  # 'k'
        if len(buf) != 1 + _KEEPALIVE.size:
            raise MalformedMessageError(
                f"a primary keepalive has {_KEEPALIVE.size} bytes after its tag, "
                f"not {len(buf) - 1}",
                offset=min(len(buf), 1 + _KEEPALIVE.size),
                message_type="PRIMARY KEEPALIVE",
            )
        wal_end, send_time, reply = _KEEPALIVE.unpack_from(buf, 1)
        if reply > 1:
            raise MalformedMessageError(
                f"reply_requested must be 0 or 1, not {reply}",
                offset=1 + _KEEPALIVE.size - 1,
                message_type="PRIMARY KEEPALIVE",
            )
        return PrimaryKeepalive(
            wal_end=Lsn(wal_end), send_time=PgTimestamp(send_time), reply_requested=bool(reply)
        )
    raise MalformedMessageError(
        f"unknown CopyData frame tag 0x{tag:02x}; expected 'w' (XLogData) or 'k' (keepalive)",
        offset=0,
        message_type="COPY DATA",
    )


def read_xlog_data(buf: bytes) -> tuple[Lsn, bytes] | None:
    """Split an XLogData frame into ``(wal_start, payload)`` without building ``XLogData``.

    The cheap path for the receive loop, which needs only these two fields of each
    message. ``wal_end`` and ``send_time`` are skipped (the walsender sets ``wal_end``
    of an XLogData frame to its current send position, which keepalives also carry).

    Args:
        buf: a CopyData payload as received.

    Returns:
        ``(wal_start, payload)`` for a well-formed ``w`` frame; None for anything else
        (a keepalive, or a frame ``parse_copy_data`` will reject with the reason).
    """
    if len(buf) < _XLOG_PAYLOAD or buf[0] != 0x77:
        return None
    return Lsn(U64.unpack_from(buf, 1)[0]), buf[_XLOG_PAYLOAD:]


XLOG_RECORD_HEADER: Final = struct.Struct(">QI")
"""What precedes a recorded frame's payload: its start LSN and the payload's length
(``xlog_records``; ``daemon.recording``'s file format). The kernel writes the same bytes."""


def xlog_records_reference(frames: list[bytes], start: int, stop: int, out: list[bytes]) -> None:
    """``xlog_records`` in Python: the reference the kernel's form is compared with."""
    for index in range(start, stop):
        split = read_xlog_data(frames[index])
        if split is None:
            raise ValueError(f"frame {index} is not an XLogData frame")
        wal_start, payload = split
        out.append(XLOG_RECORD_HEADER.pack(wal_start, len(payload)) + payload)


def xlog_records(frames: list[bytes], start: int, stop: int, out: list[bytes]) -> None:
    """Append, per XLogData frame of ``frames[start:stop]``, ``XLOG_RECORD_HEADER`` and the
    payload: how ``wal2delta capture`` records a frame (``daemon.recording``). In C when
    the kernel is built.

    Raises:
        ValueError: a frame is not an XLogData frame (callers hand over runs of frames the
            assembler took, ``Assembler.feed_row_frames``).
    """
    if COMPILED is None:
        xlog_records_reference(frames, start, stop, out)
    else:
        COMPILED.xlog_records(frames, start, stop, out)


def encode_standby_status_update(
    *,
    write: int,
    flush: int,
    apply: int,
    send_time: int,
    reply_requested: bool = False,
) -> bytes:
    """Encode a standby status update (``r``): the positions we report to the server.

    Args:
        write: last WAL position received (plus one byte, as PostgreSQL counts it).
        flush: last WAL position durable at the destination; the slot may free WAL before it.
        apply: last WAL position applied; wal2delta reports the flush position here.
        send_time: the client's clock, microseconds since 2000-01-01 UTC.
        reply_requested: ask the server to answer with a keepalive at once.

    Returns:
        The CopyData payload to send.

    Raises:
        ValueError: a position is outside the unsigned 64-bit range.
    """
    for name, value in (("write", write), ("flush", flush), ("apply", apply)):
        if not 0 <= value <= _U64_MAX:
            raise ValueError(f"{name} position {value} is not a valid LSN.")
    return _STATUS_UPDATE.pack(b"r", write, flush, apply, send_time, 1 if reply_requested else 0)
