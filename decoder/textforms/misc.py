"""Every other builtin leaf: bool, bytea, "char", text-like types, json(b), jsonpath, uuid,
bit strings, pg_lsn, tid, snapshots and int2vector/oidvector."""

from __future__ import annotations

import struct
from uuid import UUID

from decoder.textforms.base import I32, exact


def read_bits(data: bytes) -> str:
    # bit_send: int32 bit length, then the bits, most significant first.
    length = I32.unpack_from(data)[0]
    exact(data[4:], (length + 7) // 8)
    return "".join(f"{byte:08b}" for byte in data[4:])[:length]


def read_char(data: bytes) -> str:
    # charout prints NUL as an empty string and bytes above 127 as \ooo octal.
    byte = exact(data, 1)[0]
    if byte == 0:
        return ""
    return chr(byte) if byte < 128 else f"\\{byte:03o}"


def read_utf8(data: bytes) -> str:
    return data.decode("utf-8")


def read_versioned_text(data: bytes) -> str:
    # jsonb_send and jsonpath_send: a version byte (1), then the text form.
    if not data or data[0] != 1:
        raise ValueError("unknown binary format version")
    return data[1:].decode("utf-8")


def read_bytea(data: bytes) -> str:
    return "\\x" + data.hex()


def read_bool(data: bytes) -> str:
    return bool_text(bool(exact(data, 1)[0]))


def bool_text(value: bool) -> str:
    """``boolout``: ``t`` or ``f``."""
    return "t" if value else "f"


def read_uuid(data: bytes) -> str:
    return uuid_text(UUID(bytes=exact(data, 16)))


def uuid_text(value: UUID) -> str:
    """``uuid_out``: 32 lowercase hex digits in groups of 8-4-4-4-12."""
    return str(value)


def read_lsn(data: bytes) -> str:
    lsn = int.from_bytes(exact(data, 8), "big")
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def read_tid(data: bytes) -> str:
    block, offset = struct.unpack(">IH", data)
    return f"({block},{offset})"


def read_snapshot(data: bytes) -> str:
    # txid_snapshot_send / pg_snapshot_send: nxip, xmin, xmax, then the in-progress xids.
    count, xmin, xmax = struct.unpack_from(">iqq", data)
    xips = struct.unpack(f">{count}q", data[20:])
    return f"{xmin}:{xmax}:" + ",".join(str(x) for x in xips)


def read_vector(data: bytes) -> str:
    """int2vector and oidvector: sent as a one-dimensional array, printed space-separated."""
    ndim, has_nulls, element_oid = struct.unpack_from(">iiI", data)
    if ndim == 0:
        return ""
    size, _ = struct.unpack_from(">ii", data, 12)
    if ndim != 1 or has_nulls or element_oid not in {21, 26}:
        raise ValueError("a vector is one-dimensional, of int2 or oid, without NULLs")
    layout = ">" + "ih" * size if element_oid == 21 else ">" + "iI" * size
    values = struct.unpack(layout, data[20:])
    return " ".join(str(v) for v in values[1::2])
