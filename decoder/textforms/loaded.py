"""The Python values psycopg loads, printed as PostgreSQL's output functions print them.

The sink meets Python values where it has no bytes to read: a binary value of a text-kept
type only psycopg's loaders read, and the values (key and stored ones) it writes next to a
rejected value. ``value_text`` prints them with the families' printers, so a value prints
the same whether it was read from its binary form or loaded by psycopg first.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from decimal import Decimal
from typing import Final
from uuid import UUID

from psycopg.types.multirange import Multirange
from psycopg.types.range import Range

from decoder.textforms.base import UnknownBinaryFormatError
from decoder.textforms.containers import array_value_text, multirange_value_text, range_value_text
from decoder.textforms.datetime import date_text, datetime_text, time_text
from decoder.textforms.misc import bool_text, uuid_text
from decoder.textforms.network import ip_text
from decoder.textforms.numeric import decimal_text, float8_text

RAW_BYTES_TYPE: Final = "(loaded as raw bytes)"
"""``UnknownBinaryFormatError.type_name`` of a value psycopg left as bytes."""


def value_text(value: object) -> str:
    """PostgreSQL's text form of a value psycopg loaded (or the sink converted).

    Strings, booleans, integers, floats (as ``float8out``), ``Decimal`` (``numeric_out``),
    dates, times and timestamps (an aware one as an instant in UTC), UUIDs, ``ipaddress``
    values, lists (``array_out``, ``,``-delimited), ranges and multiranges; anything else
    prints as ``str``.

    Raises:
        UnknownBinaryFormatError: the value (or one inside it) is raw bytes, psycopg's
            fallback for a binary form it cannot read: the type's send format, never its
            text, so it is never printed.
    """
    match value:
        case str():
            return value
        case bool():
            return bool_text(value)
        case int():
            return str(value)
        case UUID():
            return uuid_text(value)
        case Decimal():
            return decimal_text(value)
        case float():
            return float8_text(value)
        case dt.datetime():
            return datetime_text(value)
        case dt.date():
            return date_text(value)
        case dt.time():
            return time_text(value)
        case bytes() | bytearray() | memoryview():
            raise UnknownBinaryFormatError(
                RAW_BYTES_TYPE, "psycopg has no loader for its binary form"
            )
        case list():
            return array_value_text(value, value_text)
        case (
            ipaddress.IPv4Address()
            | ipaddress.IPv6Address()
            | ipaddress.IPv4Interface()
            | ipaddress.IPv6Interface()
            | ipaddress.IPv4Network()
            | ipaddress.IPv6Network()
        ):
            return ip_text(value)
        case Range():
            return range_value_text(value, value_text)
        case Multirange():
            return multirange_value_text(value, _range_text)
    return str(value)


def _range_text(value: Range[object]) -> str:
    return range_value_text(value, value_text)
