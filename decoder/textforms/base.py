"""What every family of ``decoder.textforms`` shares: the reader types, the error, layouts."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

Reader = Callable[[bytes], str]
"""A type's binary send format -> PostgreSQL's text form of the value."""

ReaderLookup = Callable[[int], Reader]
"""Type OID -> its reader; raises ``UnknownBinaryFormatError`` for a type without one."""


class UnknownBinaryFormatError(ValueError):
    """A value arrived in a binary form wal2delta cannot print as PostgreSQL would.

    Attributes:
        type_name: the type, as ``schema.name`` when known, else ``type OID n``.
        reason: why its binary form cannot be read, as a sentence fragment.
    """

    def __init__(self, type_name: str, reason: str) -> None:
        self.type_name = type_name
        self.reason = reason
        super().__init__(type_name, reason)

    def __str__(self) -> str:
        return (
            f"the binary form of type {self.type_name} cannot be turned into its text form: "
            f"{self.reason}; replicate the table in text mode (source binary: false)"
        )


I16: Final = struct.Struct(">h")
I32: Final = struct.Struct(">i")
I64: Final = struct.Struct(">q")
F64: Final = struct.Struct(">d")
INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1


def exact(data: bytes, size: int) -> bytes:
    """``data`` when it is ``size`` bytes long; ``ValueError`` otherwise."""
    if len(data) != size:
        raise ValueError(f"expected {size} bytes, got {len(data)}")
    return data
