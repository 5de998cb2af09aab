"""A bounds-checked reader over one protocol message.

Every read checks the remaining length first and raises ``MalformedMessageError`` naming
the message type, the offset and the field, so a short message can never be read past its
end (``io.BytesIO.read(n)`` silently returning fewer bytes is the trap other pgoutput
parsers fell into). Integers are big-endian, as PostgreSQL's ``pq_sendint*`` writes them.

The reader works on ``bytes``: a ``memoryview`` is copied once on construction because the
parser hands out column values and names as owned ``bytes``/``str`` anyway, and
``bytes.find`` locates string terminators in C.
"""

from __future__ import annotations

import struct
from typing import Final

from decoder.errors import MalformedMessageError

_U8: Final = struct.Struct(">B")
_I16: Final = struct.Struct(">h")
_U16: Final = struct.Struct(">H")
_I32: Final = struct.Struct(">i")
U32: Final = struct.Struct(">I")
"""Big-endian unsigned 32-bit integers (OIDs, xids, lengths): the decoder's one layout."""
_I64: Final = struct.Struct(">q")
U64: Final = struct.Struct(">Q")
"""Big-endian unsigned 64-bit integers (LSNs)."""


class Reader:
    """Reads fields of one message in order; ``pos`` is the offset of the next field.

    Args:
        buf: the whole message, tag byte included, so offsets match what a hex dump shows.
        pos: where reading starts (1 skips the tag byte).
        message_type: the message name used in error messages.
    """

    __slots__ = ("buf", "end", "message_type", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int = 0, message_type: str = "UNKNOWN"):
        self.buf: bytes = buf if isinstance(buf, bytes) else bytes(buf)
        self.pos = pos
        self.end = len(self.buf)
        self.message_type = message_type

    @property
    def remaining(self) -> int:
        """Bytes not read yet."""
        return self.end - self.pos

    def error(self, reason: str, offset: int | None = None) -> MalformedMessageError:
        """Build (not raise) an error located at ``offset`` (default: the current position)."""
        return MalformedMessageError(
            reason,
            offset=self.pos if offset is None else offset,
            message_type=self.message_type,
        )

    def short(self, needed: int, field: str) -> MalformedMessageError:
        """Build the error for a field that does not fit in the remaining bytes."""
        return self.error(
            f"message ends before {field}: it needs {needed} bytes but {self.remaining} remain"
        )

    def unpack(self, layout: struct.Struct, field: str) -> tuple[int, ...]:
        """Read a fixed-size group of fields described by ``layout``."""
        pos = self.pos
        end = pos + layout.size
        if end > self.end:
            raise self.short(layout.size, field)
        self.pos = end
        values: tuple[int, ...] = layout.unpack_from(self.buf, pos)
        return values

    def _one(self, layout: struct.Struct, field: str) -> int:
        pos = self.pos
        end = pos + layout.size
        if end > self.end:
            raise self.short(layout.size, field)
        self.pos = end
        value: int = layout.unpack_from(self.buf, pos)[0]
        return value

    def u8(self, field: str) -> int:
        """Read an unsigned byte (``Byte1``/``Int8``)."""
        pos = self.pos
        if pos >= self.end:
            raise self.short(1, field)
        self.pos = pos + 1
        return self.buf[pos]

    def i16(self, field: str) -> int:
        """Read a signed 16-bit integer."""
        return self._one(_I16, field)

    def u16(self, field: str) -> int:
        """Read an unsigned 16-bit integer (column counts)."""
        return self._one(_U16, field)

    def i32(self, field: str) -> int:
        """Read a signed 32-bit integer (lengths, type modifiers)."""
        return self._one(_I32, field)

    def u32(self, field: str) -> int:
        """Read an unsigned 32-bit integer (OIDs, transaction ids)."""
        return self._one(U32, field)

    def i64(self, field: str) -> int:
        """Read a signed 64-bit integer (timestamps)."""
        return self._one(_I64, field)

    def u64(self, field: str) -> int:
        """Read an unsigned 64-bit integer (LSNs)."""
        return self._one(U64, field)

    def read_bytes(self, length: int, field: str) -> bytes:
        """Read ``length`` raw bytes."""
        if length < 0:
            raise self.error(f"{field} has a negative length {length}")
        pos = self.pos
        end = pos + length
        if end > self.end:
            raise self.short(length, field)
        self.pos = end
        return self.buf[pos:end]

    def cstring(self, field: str) -> str:
        """Read a NUL-terminated UTF-8 string (``String`` in the protocol docs)."""
        pos = self.pos
        nul = self.buf.find(b"\0", pos)
        if nul < 0:
            raise self.error(f"{field} is not terminated by a NUL byte")
        try:
            text = self.buf[pos:nul].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"{field} is not valid UTF-8", pos + exc.start) from None
        self.pos = nul + 1
        return text

    def expect_end(self) -> None:
        """Fail when bytes remain after a complete message."""
        if self.pos != self.end:
            raise self.error(f"{self.remaining} unexpected bytes after the end of the message")
