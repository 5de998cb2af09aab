"""Durations and byte sizes as operators write them.

Durations accept a number of seconds (``10``, ``0.5``) or one or more ``<number><unit>``
terms (``500ms``, ``1s``, ``5m``, ``1h30m``, ``2d``) with units ``ms``, ``s``, ``m``,
``h`` and ``d``, the Go/Prometheus spelling Kubernetes operators already use. They
become ``datetime.timedelta``; callers use ``.total_seconds()``.

Sizes accept a number of bytes or ``<number><unit>``. Units follow the two standards and
nothing in between: SI units are powers of 1000 (``kB``, ``MB``, ``GB``, ``TB``) and IEC
units powers of 1024 (``KiB``, ``MiB``, ``GiB``, ``TiB``), as in Kubernetes quantities and
pydantic. Unit letters are case-insensitive (``64mib`` is ``64MiB``) and a trailing ``B``
is optional (``64Mi``), because nobody means bits in a memory limit.

Both reject booleans: YAML 1.1 reads ``yes`` and ``on`` as ``True``, and ``True`` is an
``int`` in Python, which would silently mean "1 second" or "1 byte".

The ``Duration``, ``NonNegativeDuration`` and ``ByteSize`` annotated types plug the parsers
into pydantic. ``Duration`` must be greater than zero: every duration in the configuration
is an interval, a timeout or a limit for which zero means nothing useful.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Final

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

_DURATION_UNITS: Final[dict[str, float]] = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_DURATION_TERM: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)", re.IGNORECASE)
_NUMBER: Final = re.compile(r"[+-]?(\d+(?:\.\d*)?|\.\d+)")

_SIZE_UNITS: Final[dict[str, int]] = {
    "": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
}
_SIZE: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ki|mi|gi|ti|k|m|g|t|)b?", re.IGNORECASE)


def parse_duration(value: object) -> timedelta:
    """Parse a duration as the configuration spells it.

    Args:
        value: a ``timedelta``, a number of seconds, or a string such as ``"500ms"``,
            ``"10s"``, ``"5m"``, ``"1h30m"`` or ``"30"``.

    Returns:
        The duration. It may be zero or negative (``"-5s"``); the annotated types check
        the sign so that the message names the field.

    Raises:
        ValueError: the value is a boolean, an unknown unit, or not a duration at all.
    """
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 10s, 500ms or 5m, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"expected a finite duration, got {value!r}")
        return timedelta(seconds=value)
    if not isinstance(value, str):
        raise ValueError(
            f"expected a duration such as 10s, 500ms or 5m, got {type(value).__name__}"
        )
    text = value.strip()
    sign = 1.0
    if text[:1] in {"+", "-"}:
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:].lstrip()
    if _NUMBER.fullmatch(text):
        return timedelta(seconds=sign * float(text))
    seconds = 0.0
    position = 0
    for match in _DURATION_TERM.finditer(text):
        if match.start() != position and text[position : match.start()].strip():
            break
        seconds += float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]
        position = match.end()
    if position == 0 or text[position:].strip():
        raise ValueError(
            f"invalid duration {value!r}: use a number of seconds or terms like "
            "500ms, 10s, 5m, 1h, 2d (also combined: 1h30m)"
        )
    return timedelta(seconds=sign * seconds)


def format_duration(value: timedelta) -> str:
    """Render a duration in the shortest unit-suffixed form ``parse_duration`` reads back.

    Args:
        value: the duration.

    Returns:
        ``"10s"``, ``"500ms"``, ``"5m"``, ``"1h30m"``...
    """
    milliseconds = round(value.total_seconds() * 1000)
    if milliseconds == 0:
        return "0s"
    sign = "-" if milliseconds < 0 else ""
    milliseconds = abs(milliseconds)
    parts: list[str] = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        count, milliseconds = divmod(milliseconds, size)
        if count:
            parts.append(f"{count}{unit}")
    if milliseconds:
        parts.append(f"{milliseconds}ms")
    return sign + "".join(parts)


def parse_byte_size(value: object) -> int:
    """Parse a byte size as the configuration spells it.

    Args:
        value: a number of bytes or a string such as ``"64MiB"``, ``"1GB"``, ``"512kB"``.

    Returns:
        The number of bytes, rounded down to a whole byte.

    Raises:
        ValueError: the value is a boolean, negative, fractional without a unit, or
            has an unknown unit.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a size such as 64MiB or 1GB, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a size cannot be negative, got {value}")
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a size such as 64MiB or 1GB, got {value!r}")
    match = _SIZE.fullmatch(value.strip())
    if match is None:
        raise ValueError(
            f"invalid size {value!r}: use a number of bytes or a unit: "
            "kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)"
        )
    number, unit = match.groups()
    multiplier = _SIZE_UNITS[unit.lower()]
    if multiplier == 1 and not float(number).is_integer():
        raise ValueError(f"invalid size {value!r}: a number of bytes must be whole")
    return int(float(number) * multiplier)


def format_byte_size(value: int) -> str:
    """Render a byte count with the largest IEC or SI unit that divides it exactly.

    Args:
        value: the number of bytes.

    Returns:
        ``"64MiB"``, ``"1GB"``, ``"512kB"`` or the plain number.
    """
    if value == 0:
        return "0"
    for name, size in (
        ("TiB", 1024**4),
        ("TB", 1000**4),
        ("GiB", 1024**3),
        ("GB", 1000**3),
        ("MiB", 1024**2),
        ("MB", 1000**2),
        ("KiB", 1024),
        ("kB", 1000),
    ):
        if value % size == 0:
            return f"{value // size}{name}"
    return str(value)


def _positive_duration(raw: object) -> timedelta:
    value = parse_duration(raw)
    if value <= timedelta(0):
        raise ValueError(f"must be greater than zero, got {format_duration(value)}")
    return value


def _non_negative_duration(raw: object) -> timedelta:
    value = parse_duration(raw)
    if value < timedelta(0):
        raise ValueError(f"must not be negative, got {format_duration(value)}")
    return value


@dataclass(frozen=True)
class TypeLabel:
    """How ``config.docs`` names an annotated type; pydantic ignores this metadata."""

    label: str


#: What an editor validating the YAML against the JSON Schema accepts as a duration.
DURATION_JSON_SCHEMA: Final = {
    "anyOf": [
        {"type": "number", "minimum": 0},
        # _DURATION_TERM, repeated; JSON Schema patterns have no case-insensitive flag.
        {"type": "string", "pattern": r"^\s*((\d+(\.\d*)?|\.\d+)\s*([mM][sS]|[sSmMhHdD])\s*)+$"},
    ],
    "description": "seconds, or <number><unit> parts: 500ms, 10s, 1h30m",
}

#: A duration greater than zero; dumps to JSON as ``"10s"``.
Duration = Annotated[
    timedelta,
    BeforeValidator(_positive_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
    WithJsonSchema(DURATION_JSON_SCHEMA),
    TypeLabel("duration > 0"),
]

#: A duration of zero or more; dumps to JSON as ``"10s"``.
NonNegativeDuration = Annotated[
    timedelta,
    BeforeValidator(_non_negative_duration),
    PlainSerializer(format_duration, return_type=str, when_used="json"),
    WithJsonSchema(DURATION_JSON_SCHEMA),
    TypeLabel("duration ≥ 0"),
]


#: A byte size of zero or more, written as a number or with a unit.
ByteSize = Annotated[
    int,
    BeforeValidator(parse_byte_size),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                # _SIZE, without a case-insensitive flag.
                {
                    "type": "string",
                    "pattern": r"^\s*(\d+(\.\d*)?|\.\d+)\s*([kKmMgGtT][iI]?)?[bB]?\s*$",
                },
            ],
            "description": "bytes, or a number with a unit: 64MiB, 1GB",
        }
    ),
    TypeLabel("size"),
]
