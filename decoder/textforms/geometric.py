"""Geometric types: point, lseg, box, path, polygon, line and circle, their float8
coordinates printed as ``float8out`` does."""

from __future__ import annotations

import struct

from decoder.textforms.base import I32
from decoder.textforms.numeric import float8_text


def _points(data: bytes, offset: int, count: int) -> list[str]:
    values = struct.unpack_from(f">{2 * count}d", data, offset)
    if len(data) != offset + 16 * count:
        raise ValueError("trailing bytes after the points")
    return [
        f"({float8_text(values[i])},{float8_text(values[i + 1])})" for i in range(0, 2 * count, 2)
    ]


def read_point(data: bytes) -> str:
    return _points(data, 0, 1)[0]


def read_lseg(data: bytes) -> str:
    return "[" + ",".join(_points(data, 0, 2)) + "]"


def read_box(data: bytes) -> str:
    return ",".join(_points(data, 0, 2))


def read_path(data: bytes) -> str:
    closed, count = struct.unpack_from(">bi", data)
    points = ",".join(_points(data, 5, count))
    return f"({points})" if closed else f"[{points}]"


def read_polygon(data: bytes) -> str:
    count = I32.unpack_from(data)[0]
    return "(" + ",".join(_points(data, 4, count)) + ")"


def read_line(data: bytes) -> str:
    return "{" + ",".join(float8_text(v) for v in struct.unpack(">3d", data)) + "}"


def read_circle(data: bytes) -> str:
    x, y, radius = struct.unpack(">3d", data)
    return f"<({float8_text(x)},{float8_text(y)}),{float8_text(radius)}>"
