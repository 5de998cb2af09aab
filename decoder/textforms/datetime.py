"""Dates and times: date, time, timetz, timestamp, timestamptz and interval.

Binary readers (``read_*``) and the printers they share with the Python values psycopg
loads (``date_text``, ``datetime_text``, ``time_text``), as the output functions print
them with ``DateStyle ISO`` and ``IntervalStyle postgres``; an instant (timestamptz) in
``TimeZone UTC``.
"""

from __future__ import annotations

import datetime as dt
import struct
from typing import Final

from decoder.textforms.base import I32, I64, INT32_MAX, INT64_MAX

_USECS_PER_DAY: Final = 86_400_000_000
_DAYS_1970_TO_2000: Final = 10_957
_PG_EPOCH_DATE: Final = dt.date(2000, 1, 1)
_PG_EPOCH: Final = dt.datetime(2000, 1, 1)
_PG_EPOCH_UTC: Final = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
_MICROSECOND: Final = dt.timedelta(microseconds=1)


def _civil(days_since_2000: int) -> tuple[int, int, int]:
    """Proleptic Gregorian (year, month, day) of a day count; year 0 is 1 BC."""
    # Howard Hinnant's days -> civil algorithm, with floor division for every era.
    z = days_since_2000 + _DAYS_1970_TO_2000 + 719_468
    era = z // 146_097
    day_of_era = z - era * 146_097
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted_month = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * shifted_month + 2) // 5 + 1
    month = shifted_month + 3 if shifted_month < 10 else shifted_month - 9
    year = year_of_era + era * 400 + (1 if month <= 2 else 0)
    return year, month, day


def _date_parts(days_since_2000: int) -> tuple[str, bool]:
    """``YYYY-MM-DD`` (at least four year digits) and whether the year is BC."""
    year, month, day = _civil(days_since_2000)
    bc = year <= 0
    shown = 1 - year if bc else year
    return f"{shown:04d}-{month:02d}-{day:02d}", bc


def _fraction(microseconds: int) -> str:
    return f".{microseconds:06d}".rstrip("0") if microseconds else ""


def time_of_day(microseconds: int) -> str:
    """``HH:MM:SS[.ffffff]`` from microseconds since midnight; 24:00:00 is a valid time."""
    seconds, fraction = divmod(microseconds, 1_000_000)
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{_fraction(fraction)}"


def utc_offset(seconds_east: int) -> str:
    """A zone as ``EncodeTimezone`` prints it: ``+HH``, ``+HH:MM`` or ``+HH:MM:SS``."""
    sign = "-" if seconds_east < 0 else "+"
    hours, rest = divmod(abs(seconds_east), 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{sign}{hours:02d}"
    if minutes or secs:
        text += f":{minutes:02d}"
    if secs:
        text += f":{secs:02d}"
    return text


def day_count_text(days: int) -> str:
    """``date_out`` of a day count since 2000-01-01 (``date_send``'s int32)."""
    if days == INT32_MAX:
        return "infinity"
    if days == -INT32_MAX - 1:
        return "-infinity"
    text, bc = _date_parts(days)
    return text + " BC" if bc else text


def read_date(data: bytes) -> str:
    return day_count_text(I32.unpack(data)[0])


def timestamp_text(microseconds: int, zone: str) -> str:
    """``timestamp_out`` of microseconds since 2000-01-01 00:00, ``zone`` appended to the
    time (``+00`` for an instant printed in UTC, empty for a wall-clock timestamp)."""
    if microseconds == INT64_MAX:
        return "infinity"
    if microseconds == -INT64_MAX - 1:
        return "-infinity"
    days, of_day = divmod(microseconds, _USECS_PER_DAY)
    date, bc = _date_parts(days)
    text = f"{date} {time_of_day(of_day)}{zone}"
    return text + " BC" if bc else text


def read_timestamp(data: bytes) -> str:
    return timestamp_text(I64.unpack(data)[0], "")


def read_timestamptz(data: bytes) -> str:
    # An instant; printed in TimeZone UTC (see the module docstring).
    return timestamp_text(I64.unpack(data)[0], "+00")


def read_time(data: bytes) -> str:
    return time_of_day(I64.unpack(data)[0])


def read_timetz(data: bytes) -> str:
    # timetz_send: int64 microseconds, then the zone as int32 seconds *west* of UTC.
    microseconds, west = struct.unpack(">qi", data)
    return time_of_day(microseconds) + utc_offset(-west)


def _trunc_divmod(value: int, divisor: int) -> tuple[int, int]:
    """Divide like C: the quotient truncates toward zero, the remainder keeps the sign."""
    quotient = abs(value) // divisor
    if value < 0:
        quotient = -quotient
    return quotient, value - quotient * divisor


def format_interval(microseconds: int, days: int, months: int) -> str:
    """Render an interval as PostgreSQL's ``interval_out`` does with IntervalStyle postgres.

    A port of ``EncodeInterval`` (``INTSTYLE_POSTGRES``) and ``AppendSeconds`` in
    ``datetime.c``: nonzero year/mon/day parts, then ``[-]HH:MM:SS[.ffffff]`` when the time
    part is nonzero or nothing else was printed; a part after a negative one gets an
    explicit ``+`` when positive. PostgreSQL 17's infinite intervals print as
    ``infinity`` and ``-infinity``.
    """
    if (microseconds, days, months) == (INT64_MAX, INT32_MAX, INT32_MAX):
        return "infinity"
    if (microseconds, days, months) == (-INT64_MAX - 1, -INT32_MAX - 1, -INT32_MAX - 1):
        return "-infinity"
    years, months = _trunc_divmod(months, 12)
    parts: list[str] = []
    is_before = False
    for value, unit in ((years, "year"), (months, "mon"), (days, "day")):
        if value == 0:
            continue
        sign = "+" if is_before and value > 0 else ""
        parts.append(f"{sign}{value} {unit}{'' if value == 1 else 's'}")
        is_before = value < 0
    hours, rest = _trunc_divmod(microseconds, 3_600_000_000)
    minutes, rest = _trunc_divmod(rest, 60_000_000)
    seconds, fraction = _trunc_divmod(rest, 1_000_000)
    if not parts or microseconds != 0:
        minus = hours < 0 or minutes < 0 or seconds < 0 or fraction < 0
        sign = "-" if minus else "+" if is_before else ""
        text = f"{sign}{abs(hours):02d}:{abs(minutes):02d}:{abs(seconds):02d}"
        if fraction:
            text += "." + f"{abs(fraction):06d}".rstrip("0")
        parts.append(text)
    return " ".join(parts)


def read_interval(data: bytes) -> str:
    microseconds, days, months = struct.unpack(">qii", data)
    return format_interval(microseconds, days, months)


# --- the Python values psycopg loads (no infinities: Python has none) ----------------------


def date_text(value: dt.date) -> str:
    """A ``date`` as ``date_out`` prints it."""
    return day_count_text((value - _PG_EPOCH_DATE).days)


def datetime_text(value: dt.datetime) -> str:
    """A naive ``datetime`` as ``timestamp_out``, an aware one as ``timestamptz_out`` prints
    the instant in ``TimeZone UTC``."""
    if value.tzinfo is None:
        return timestamp_text((value - _PG_EPOCH) // _MICROSECOND, "")
    return timestamp_text((value - _PG_EPOCH_UTC) // _MICROSECOND, "+00")


def time_text(value: dt.time) -> str:
    """A ``time`` as ``time_out`` prints it; one with a zone as ``timetz_out``."""
    of_day = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000
    text = time_of_day(of_day + value.microsecond)
    offset = value.utcoffset()
    return text if offset is None else text + utc_offset(int(offset.total_seconds()))
