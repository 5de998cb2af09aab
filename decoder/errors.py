"""The exception root of wal2delta and the decoder's errors.

The root lives here because ``decoder`` imports nothing else of ours; every other package
derives its errors from ``Wal2DeltaError``. ``retryable`` classifies an error at the
boundary: a retryable error makes the service reconnect from the last durable LSN, a
terminal one stops it with a message that says what to fix.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Final

_SECRET: Final = re.compile(r"(?i)((?:token|password|secret)[\w.-]*\s*[=:]\s*)[^\s;,&]+")
_CAUSE_LIMIT: Final = 300


def cause_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of an error, trimmed, secrets masked.

    What every message that wraps an error shows of its cause, so a log line names the
    root cause itself instead of pointing at a chained exception nobody prints.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = _SECRET.sub(lambda m: m.group(1) + "****", lines[0]) if lines else ""
    if len(text) > _CAUSE_LIMIT:
        text = text[: _CAUSE_LIMIT - 3] + "..."
    kind = type(exc).__name__
    return f"{kind}: {text}" if text else kind


class Wal2DeltaError(Exception):
    """Root of every error wal2delta raises on purpose."""

    retryable: ClassVar[bool] = False


class DecodeError(Wal2DeltaError):
    """Bytes that are not a valid pgoutput stream at this position.

    Attributes:
        reason: what is wrong, as a sentence fragment.
        offset: byte offset inside the message where decoding failed.
        message_type: the message name (``INSERT``, ``STREAM ABORT``...) or ``UNKNOWN``.
        wal_start: the ``XLogData`` start LSN of the frame, when known.
        xid: the transaction the message belongs to, when known.
    """

    def __init__(
        self,
        reason: str,
        *,
        offset: int,
        message_type: str,
        wal_start: int | None = None,
        xid: int | None = None,
    ) -> None:
        self.reason = reason
        self.offset = offset
        self.message_type = message_type
        self.wal_start = wal_start
        self.xid = xid
        super().__init__(reason, offset, message_type, wal_start, xid)

    def __str__(self) -> str:
        where = f"{self.message_type} message at offset {self.offset}"
        if self.wal_start is not None:
            where += f" (WAL {self.wal_start >> 32:X}/{self.wal_start & 0xFFFFFFFF:X})"
        if self.xid is not None:
            where += f" in transaction {self.xid}"
        return f"cannot decode {where}: {self.reason}"

    def __reduce__(self) -> tuple[object, ...]:
        # The keyword-only constructor cannot be called with ``self.args`` positionally,
        # which is what the default exception pickling does.
        return (
            _restore_decode_error,
            (type(self), self.reason, self.offset, self.message_type, self.wal_start, self.xid),
        )

    def with_wal_start(self, wal_start: int) -> DecodeError:
        """Return the same error located at the frame's WAL start."""
        return type(self)(
            self.reason,
            offset=self.offset,
            message_type=self.message_type,
            wal_start=wal_start,
            xid=self.xid,
        )


def _restore_decode_error(
    cls: type[DecodeError], reason: str, offset: int, *context: Any
) -> DecodeError:
    """Unpickle a ``DecodeError`` (see ``DecodeError.__reduce__``)."""
    message_type, wal_start, xid = context
    return cls(reason, offset=offset, message_type=message_type, wal_start=wal_start, xid=xid)


class MalformedMessageError(DecodeError):
    """Short buffer, unknown tag, unknown flags or unknown column status byte."""


class ProtocolSequenceError(DecodeError):
    """A well-formed message that is illegal where it arrived (e.g. INSERT outside BEGIN)."""


class SpoolError(Wal2DeltaError):
    """A spill file could not be written, read or created, or the spool would pass its bound.

    The volume is full (``ENOSPC``), a quota is reached (``EDQUOT``), the disk fails
    (``EIO``) or ``spool.max_bytes`` would be passed. Nothing of the transaction being
    spooled was acknowledged (it is not durable anywhere), so the server sends it again.
    Retryable: space can come back (files removed, the volume grown online), and the
    supervisor reconnects with backoff from the durable position.

    Attributes:
        directory: the spool directory.
        needed_bytes: bytes the failed write (or read) needed.
        free_bytes: bytes free to us in the directory's file system (``statvfs``), None
            when that could not be asked.
        reason: a bounded label: ``no_space``, ``quota``, ``io_error``, ``max_bytes`` or
            ``other``.
    """

    retryable: ClassVar[bool] = True

    def __init__(
        self,
        message: str,
        directory: str,
        needed_bytes: int,
        free_bytes: int | None,
        reason: str,
    ) -> None:
        # Positional, so the default exception pickling (``self.args``) rebuilds it.
        super().__init__(message, directory, needed_bytes, free_bytes, reason)
        self.message = message
        self.directory = directory
        self.needed_bytes = needed_bytes
        self.free_bytes = free_bytes
        self.reason = reason

    def __str__(self) -> str:
        return self.message
