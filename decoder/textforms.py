"""PostgreSQL's text form of a value sent in binary, for every type whose layout is known.

Theory of operation
-------------------
The sink stores every type Delta has no faithful equivalent for as a STRING holding
PostgreSQL's text form - exactly what pgoutput's text mode sends, i.e. what the type's
output function prints. With ``binary true`` the same value arrives in the type's send
format instead, so binary mode must print those bytes the way the output function would,
or the two modes would give different Delta tables. This module does that, as a table of
pure functions ``bytes -> str`` (``Reader``), one per type:

* **Builtin leaves** (``BUILTIN_LEAVES``): ports of the output functions of the
  builtin types whose binary layout is fixed: bool ``t``/``f``, bytea as ``\\x`` hex,
  integers, ``float4``/``float8`` as the shortest digits that read back to the same value
  (``extra_float_digits = 1``, PostgreSQL's default since 12), numeric with its display
  scale, dates and timestamps (``infinity``, years past 9999 and ``BC`` included), time,
  timetz, interval, uuid, inet/cidr (``inet_net_ntop``, IPv4-mapped IPv6 included), MAC
  addresses, bit strings, geometric types, pg_lsn, tid, xid, json/jsonb/jsonpath, xml,
  int2vector/oidvector and txid/pg snapshots.
* **Containers**, whose layout wraps other values: ``array_text`` (``array_send``:
  dimensions, lower bounds, NULL flag, element OID, elements; printed as ``array_out``
  does, with the element type's delimiter), ``record_text`` (``record_send``: for each
  field its type OID and value; printed as ``record_out``), ``range_text`` and
  ``multirange_text`` (``range_send``'s flags and bounds; ``range_out``). A container
  prints each inner value with the reader of that value's type, so builtin containers of
  builtin leaves (``int4[]``, ``box[]``, ``tstzrange``...) need nothing else:
  ``builtin_text_reader`` resolves them from psycopg's registry of builtin types. User
  types (enums, domains, composites, their arrays) need the source catalog:
  ``decoder.usertypes`` describes them and reuses the functions here.

Settings: the output functions print some types by session settings. The ports follow
PostgreSQL's defaults, which is what a walsender started without options prints in text
mode: ``DateStyle ISO``, ``IntervalStyle postgres``, ``bytea_output hex``,
``extra_float_digits 1`` - and ``TimeZone UTC`` for timestamptz and timetz, which the
binary form does not carry (timestamptz is an instant; it prints as ``+00``), and
``lc_monetary C`` for money (``-$1,234.50``). The daemon's connections set exactly these
(``capture.settings.TEXT_FORM_SETTINGS``), so text mode prints the same. A type whose text
form depends on something the binary form lacks - the ``reg*`` types (names looked up by
OID) - has no reader: its values stop the sink with ``UnknownBinaryFormatError`` rather
than being stored differently from text mode.

Every reader raises ``ValueError``/``struct.error``/``IndexError`` for bytes PostgreSQL
never sends (a wrong length, an unknown flag) instead of guessing.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Context, Decimal
from typing import Final
from uuid import UUID

from psycopg import postgres
from psycopg.types.multirange import MultirangeInfo
from psycopg.types.range import RangeInfo

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


_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_F64: Final = struct.Struct(">d")
_INT32_MAX: Final = 2**31 - 1
_INT64_MAX: Final = 2**63 - 1
_USECS_PER_DAY: Final = 86_400_000_000
_DAYS_1970_TO_2000: Final = 10_957
_ASCII_SPACE: Final = frozenset(" \t\n\r\v\f")  # array_isspace; isspace() in the C locale


def _exact(data: bytes, size: int) -> bytes:
    if len(data) != size:
        raise ValueError(f"expected {size} bytes, got {len(data)}")
    return data


# --- numbers ---------------------------------------------------------------------------------


def _int_reader(layout: struct.Struct) -> Reader:
    def read(data: bytes) -> str:
        return str(layout.unpack(data)[0])

    return read


def _unsigned(data: bytes) -> str:
    if len(data) not in {4, 8}:
        raise ValueError(f"expected 4 or 8 bytes, got {len(data)}")
    return str(int.from_bytes(data, "big"))


def _shortest_text(negative: bool, digits: str, exponent: int, fixed_limit: int) -> str:
    """Print ``0.digits * 10**exponent`` as Ryu's ``to_chars`` in PostgreSQL does.

    ``exponent`` is the position of the decimal point after the first digit minus one
    (the scientific exponent); fixed notation is used for ``-4 <= exponent < limit``.
    """
    sign = "-" if negative else ""
    if -4 <= exponent < fixed_limit:
        point = exponent + 1
        if point <= 0:
            body = "0." + "0" * -point + digits
        elif point >= len(digits):
            body = digits + "0" * (point - len(digits))
        else:
            body = digits[:point] + "." + digits[point:]
        return sign + body
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"


def _special_float(value: float) -> str | None:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    return None


_WIDE: Final = Context(prec=800)


@dataclass(frozen=True, slots=True)
class _FloatFormat:
    """An IEEE binary format: its struct codes, the bits of +infinity and Ryu's fixed-point
    limit (the display exponent from which ``to_chars`` switches to scientific)."""

    value_code: str
    bits_code: str
    infinity_bits: int
    fixed_limit: int

    def from_bits(self, bits: int) -> Decimal:
        return Decimal(struct.unpack(self.value_code, struct.pack(self.bits_code, bits))[0])


_FLOAT4: Final = _FloatFormat(">f", ">I", 0x7F800000, 6)
_FLOAT8: Final = _FloatFormat(">d", ">Q", 0x7FF0000000000000, 15)


def _shortest(value: float, fmt: _FloatFormat, start: int) -> str:
    """Ryu's shortest digits for a finite nonzero ``value`` of ``fmt``, as PostgreSQL prints.

    PostgreSQL builds Ryu without ``STRICTLY_SHORTEST``: a candidate must lie strictly
    inside the value's rounding interval (the midpoints to its neighbours, bounds
    excluded), so ``1e23`` as float8 prints as ``9.999999999999999e+22``. For each length
    from ``start`` on, the value rounded down and up to that many digits are the
    candidates; the nearer one wins, ties going to the even digit.
    """
    bits = int(struct.unpack(fmt.bits_code, struct.pack(fmt.value_code, abs(value)))[0])
    exact = fmt.from_bits(bits)
    below = fmt.from_bits(bits - 1)
    # Past the largest finite value comes infinity; Ryu takes a step of the same size.
    above = (
        _WIDE.add(exact, _WIDE.subtract(exact, below))
        if bits + 1 == fmt.infinity_bits
        else fmt.from_bits(bits + 1)
    )
    low = _WIDE.divide(_WIDE.add(below, exact), 2)
    high = _WIDE.divide(_WIDE.add(exact, above), 2)
    for length in range(start, 40):
        scale = exact.adjusted() - length + 1  # candidates are n * 10**scale
        scaled = exact.scaleb(-scale, context=_WIDE)
        floor = int(scaled.to_integral_value(rounding=ROUND_FLOOR))
        options = [floor] if scaled == floor else [floor, floor + 1]
        options.sort(key=lambda n: (abs(_WIDE.subtract(scaled, Decimal(n))), n % 2))
        for n in options:
            if low < Decimal(n).scaleb(scale, context=_WIDE) < high:
                text = str(n)
                return _shortest_text(
                    value < 0, text.rstrip("0"), len(text) - 1 + scale, fmt.fixed_limit
                )
    raise AssertionError("every float has a representation of 17 digits")  # pragma: no cover


def float8_text(value: float) -> str:
    """``float8out``: the shortest digits that read back to ``value`` (Ryu ``d2s``)."""
    special = _special_float(value)
    if special is not None:
        return special
    # repr's digits are never longer than PostgreSQL's (repr also accepts a digit string
    # on the rounding interval's bounds), so the search starts at their length.
    _, digits, _ = Decimal(repr(value)).normalize().as_tuple()
    return _shortest(value, _FLOAT8, len(digits))


def float4_text(value: float) -> str:
    """``float4out``: the shortest digits that read back to the same float4 (Ryu ``f2s``)."""
    special = _special_float(value)
    if special is not None:
        return special
    return _shortest(value, _FLOAT4, 1)


def _float4(data: bytes) -> str:
    return float4_text(struct.unpack(">f", data)[0])


def _float8(data: bytes) -> str:
    return float8_text(_F64.unpack(data)[0])


_NUMERIC_POS: Final = 0x0000
_NUMERIC_NEG: Final = 0x4000
_NUMERIC_SPECIALS: Final = {0xC000: "NaN", 0xD000: "Infinity", 0xF000: "-Infinity"}


def _numeric(data: bytes) -> str:
    """``numeric_out`` from ``numeric_send``: base-10000 digits, weight, sign, scale."""
    ndigits, weight, sign, dscale = struct.unpack_from(">hhHh", data)
    special = _NUMERIC_SPECIALS.get(sign)
    if special is not None:
        return special
    if sign not in {_NUMERIC_POS, _NUMERIC_NEG} or ndigits < 0 or dscale < 0:
        raise ValueError("invalid numeric header")
    digits = struct.unpack_from(f">{ndigits}h", data, 8)
    if len(data) != 8 + 2 * ndigits or any(not 0 <= d < 10000 for d in digits):
        raise ValueError("invalid numeric digits")

    def group(index: int) -> int:
        return digits[index] if 0 <= index < ndigits else 0

    if weight < 0:
        whole = "0"
    else:
        whole = str(group(0)) + "".join(f"{group(i):04d}" for i in range(1, weight + 1))
    text = ("-" if sign == _NUMERIC_NEG else "") + whole
    if dscale > 0:
        groups = (dscale + 3) // 4
        fraction = "".join(f"{group(weight + 1 + i):04d}" for i in range(groups))
        text += "." + fraction[:dscale]
    return text


# --- dates and times -------------------------------------------------------------------------


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


def _date(data: bytes) -> str:
    days = _I32.unpack(data)[0]
    if days == _INT32_MAX:
        return "infinity"
    if days == -_INT32_MAX - 1:
        return "-infinity"
    text, bc = _date_parts(days)
    return text + " BC" if bc else text


def _timestamp_text(microseconds: int, zone: str) -> str:
    if microseconds == _INT64_MAX:
        return "infinity"
    if microseconds == -_INT64_MAX - 1:
        return "-infinity"
    days, of_day = divmod(microseconds, _USECS_PER_DAY)
    date, bc = _date_parts(days)
    text = f"{date} {time_of_day(of_day)}{zone}"
    return text + " BC" if bc else text


def _timestamp(data: bytes) -> str:
    return _timestamp_text(_I64.unpack(data)[0], "")


def _timestamptz(data: bytes) -> str:
    # An instant; printed in TimeZone UTC (see the module docstring).
    return _timestamp_text(_I64.unpack(data)[0], "+00")


def _time(data: bytes) -> str:
    return time_of_day(_I64.unpack(data)[0])


def _timetz(data: bytes) -> str:
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
    if (microseconds, days, months) == (_INT64_MAX, _INT32_MAX, _INT32_MAX):
        return "infinity"
    if (microseconds, days, months) == (-_INT64_MAX - 1, -_INT32_MAX - 1, -_INT32_MAX - 1):
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


def _interval(data: bytes) -> str:
    microseconds, days, months = struct.unpack(">qii", data)
    return format_interval(microseconds, days, months)


# --- network, bits, strings ------------------------------------------------------------------

_PGSQL_AF_INET: Final = 2
_PGSQL_AF_INET6: Final = 3


def _ipv6_text(address: bytes) -> str:
    """``inet_net_ntop_ipv6`` without the mask: the longest zero run (two words or more,
    the first of equal ones) becomes ``::``; IPv4-mapped and -compatible addresses end in
    dotted decimal."""
    words = struct.unpack(">8H", address)
    best_base, best_len = -1, 0
    run_base, run_len = -1, 0
    for index, word in enumerate(words):
        if word == 0:
            if run_base == -1:
                run_base, run_len = index, 0
            run_len += 1
            if run_len > best_len:
                best_base, best_len = run_base, run_len
        else:
            run_base = -1
    if best_len < 2:
        best_base = -1
    out = ""
    for index in range(8):
        if best_base != -1 and best_base <= index < best_base + best_len:
            if index == best_base:
                out += ":"
            continue
        if index != 0:
            out += ":"
        embedded_ipv4 = (
            index == 6
            and best_base == 0
            and (
                best_len == 6
                or (best_len == 7 and words[7] != 1)
                or (best_len == 5 and words[5] == 0xFFFF)
            )
        )
        if embedded_ipv4:
            out += ".".join(str(b) for b in address[12:])
            break
        out += f"{words[index]:x}"
    if best_base != -1 and best_base + best_len == 8:
        out += ":"
    return out


def _inet(data: bytes) -> str:
    """``inet_out``/``cidr_out`` from ``inet_send``: family, bits, is_cidr, length, address."""
    family, bits, is_cidr, size = data[0], data[1], data[2], data[3]
    address = _exact(data[4:], size)
    if family == _PGSQL_AF_INET and size == 4:
        text, full = ".".join(str(b) for b in address), 32
    elif family == _PGSQL_AF_INET6 and size == 16:
        text, full = _ipv6_text(address), 128
    else:
        raise ValueError("unknown inet address family")
    if bits > full or is_cidr not in {0, 1}:
        raise ValueError("invalid inet mask")
    return text + (f"/{bits}" if bits != full or is_cidr else "")


def _mac(size: int) -> Reader:
    def read(data: bytes) -> str:
        return ":".join(f"{b:02x}" for b in _exact(data, size))

    return read


def _bits(data: bytes) -> str:
    # bit_send: int32 bit length, then the bits, most significant first.
    length = _I32.unpack_from(data)[0]
    _exact(data[4:], (length + 7) // 8)
    return "".join(f"{byte:08b}" for byte in data[4:])[:length]


def _char(data: bytes) -> str:
    # charout prints NUL as an empty string and bytes above 127 as \ooo octal.
    byte = _exact(data, 1)[0]
    if byte == 0:
        return ""
    return chr(byte) if byte < 128 else f"\\{byte:03o}"


def _utf8(data: bytes) -> str:
    return data.decode("utf-8")


def _versioned_text(data: bytes) -> str:
    # jsonb_send and jsonpath_send: a version byte (1), then the text form.
    if not data or data[0] != 1:
        raise ValueError("unknown binary format version")
    return data[1:].decode("utf-8")


def _bytea(data: bytes) -> str:
    return "\\x" + data.hex()


def _money(data: bytes) -> str:
    """``cash_out`` under ``lc_monetary C``: ``$`` first, ``,`` every three digits, two
    fraction digits, ``-`` before the symbol."""
    cents = _I64.unpack(data)[0]
    whole, fraction = divmod(abs(cents), 100)
    sign = "-" if cents < 0 else ""
    return f"{sign}${whole:,}.{fraction:02d}"


def _bool(data: bytes) -> str:
    byte = _exact(data, 1)[0]
    return "t" if byte else "f"


def _uuid(data: bytes) -> str:
    return str(UUID(bytes=_exact(data, 16)))


def _lsn(data: bytes) -> str:
    lsn = int.from_bytes(_exact(data, 8), "big")
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def _tid(data: bytes) -> str:
    block, offset = struct.unpack(">IH", data)
    return f"({block},{offset})"


def _snapshot(data: bytes) -> str:
    # txid_snapshot_send / pg_snapshot_send: nxip, xmin, xmax, then the in-progress xids.
    count, xmin, xmax = struct.unpack_from(">iqq", data)
    xips = struct.unpack(f">{count}q", data[20:])
    return f"{xmin}:{xmax}:" + ",".join(str(x) for x in xips)


# --- geometry (float8 coordinates printed as float8out does) --------------------------------


def _points(data: bytes, offset: int, count: int) -> list[str]:
    values = struct.unpack_from(f">{2 * count}d", data, offset)
    if len(data) != offset + 16 * count:
        raise ValueError("trailing bytes after the points")
    return [
        f"({float8_text(values[i])},{float8_text(values[i + 1])})" for i in range(0, 2 * count, 2)
    ]


def _point(data: bytes) -> str:
    return _points(data, 0, 1)[0]


def _lseg(data: bytes) -> str:
    return "[" + ",".join(_points(data, 0, 2)) + "]"


def _box(data: bytes) -> str:
    return ",".join(_points(data, 0, 2))


def _path(data: bytes) -> str:
    closed, count = struct.unpack_from(">bi", data)
    points = ",".join(_points(data, 5, count))
    return f"({points})" if closed else f"[{points}]"


def _polygon(data: bytes) -> str:
    count = _I32.unpack_from(data)[0]
    return "(" + ",".join(_points(data, 4, count)) + ")"


def _line(data: bytes) -> str:
    return "{" + ",".join(float8_text(v) for v in struct.unpack(">3d", data)) + "}"


def _circle(data: bytes) -> str:
    x, y, radius = struct.unpack(">3d", data)
    return f"<({float8_text(x)},{float8_text(y)}),{float8_text(radius)}>"


# --- containers ------------------------------------------------------------------------------


def _quoted_element(text: str, delimiter: str) -> str:
    """An element as ``array_out`` prints it: quoted when empty, ``NULL`` in any case, or
    holding braces, the delimiter, a quote, a backslash or white space; ``"`` and ``\\``
    are backslash-escaped inside the quotes."""
    needs_quotes = (
        text == ""
        or (text.isascii() and text.upper() == "NULL")  # pg_strcasecmp folds ASCII only
        or any(ch in '{}"\\' or ch == delimiter or ch in _ASCII_SPACE for ch in text)
    )
    if not needs_quotes:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def array_text(data: bytes, element: ReaderLookup, delimiter: str = ",") -> str:
    """``array_out`` of an ``array_send`` value.

    The layout: int32 dimension count, int32 NULL flag, element type OID, a (size, lower
    bound) pair per dimension, then each element as int32 length (-1 for NULL) and bytes.
    Elements print with ``element(element type OID)``; an empty array is ``{}``; lower
    bounds other than 1 print as a ``[lower:upper]`` prefix per dimension, then ``=``.
    """
    ndim, _, element_oid = struct.unpack_from(">iiI", data)
    if ndim == 0:
        if len(data) != 12:
            raise ValueError("trailing bytes after an empty array")
        return "{}"
    if not 0 < ndim <= 6:
        raise ValueError(f"invalid array dimension count {ndim}")
    bounds = struct.unpack_from(f">{2 * ndim}i", data, 12)
    sizes, lowers = bounds[0::2], bounds[1::2]
    if any(size < 0 for size in sizes):
        raise ValueError("negative array dimension")
    read = element(element_oid)
    items: list[str] = []
    pos = 12 + 8 * ndim
    for _ in range(math.prod(sizes)):
        length = _I32.unpack_from(data, pos)[0]
        pos += 4
        if length == -1:
            items.append("NULL")
            continue
        if length < 0 or pos + length > len(data):
            raise ValueError("array element runs past the end")
        items.append(_quoted_element(read(data[pos : pos + length]), delimiter))
        pos += length
    if pos != len(data):
        raise ValueError("trailing bytes after the array elements")
    prefix = ""
    if any(lower != 1 for lower in lowers):
        prefix = "".join(f"[{lo}:{lo + size - 1}]" for lo, size in zip(lowers, sizes, strict=True))
        prefix += "="
    return prefix + _nest(items, sizes, delimiter)


def _nest(items: list[str], sizes: tuple[int, ...], delimiter: str) -> str:
    if len(sizes) == 1:
        return "{" + delimiter.join(items) + "}"
    step = len(items) // sizes[0] if sizes[0] else 0
    return (
        "{"
        + delimiter.join(
            _nest(items[i * step : (i + 1) * step], sizes[1:], delimiter) for i in range(sizes[0])
        )
        + "}"
    )


def _quoted_field(text: str, special: str) -> str:
    """A value as ``record_out`` and ``range_bound_escape`` print it: quoted when empty or
    holding one of ``special`` or white space; ``"`` and ``\\`` are doubled."""
    if text != "" and not any(ch in special or ch in _ASCII_SPACE for ch in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '""') + '"'


_RECORD_SPECIAL: Final = '"\\(),'
_RANGE_SPECIAL: Final = '"\\()[],'


def record_text(data: bytes, field: ReaderLookup) -> str:
    """``record_out`` of a ``record_send`` value.

    The layout: int32 field count, then per field its type OID, int32 length (-1 for
    NULL) and bytes. A NULL field prints as nothing; each other field with
    ``field(type OID)``, quoted when ``record_out`` would quote it.
    """
    count = _I32.unpack_from(data)[0]
    if count < 0:
        raise ValueError("negative record field count")
    pos = 4
    parts: list[str] = []
    for _ in range(count):
        type_oid, length = struct.unpack_from(">Ii", data, pos)
        pos += 8
        if length == -1:
            parts.append("")
            continue
        if length < 0 or pos + length > len(data):
            raise ValueError("record field runs past the end")
        parts.append(_quoted_field(field(type_oid)(data[pos : pos + length]), _RECORD_SPECIAL))
        pos += length
    if pos != len(data):
        raise ValueError("trailing bytes after the record fields")
    return "(" + ",".join(parts) + ")"


_RANGE_EMPTY: Final = 0x01
_RANGE_LB_INC: Final = 0x02
_RANGE_UB_INC: Final = 0x04
_RANGE_LB_INF: Final = 0x08
_RANGE_UB_INF: Final = 0x10


def range_text(data: bytes, bound: Reader) -> str:
    """``range_out`` of a ``range_send`` value: a flags byte, then each finite bound as
    int32 length and the subtype's binary form; bounds print with ``bound``."""
    flags = data[0]
    if flags & _RANGE_EMPTY:
        if len(data) != 1:
            raise ValueError("trailing bytes after an empty range")
        return "empty"
    pos = 1
    texts: list[str] = []
    for infinite in (flags & _RANGE_LB_INF, flags & _RANGE_UB_INF):
        if infinite:
            texts.append("")
            continue
        length = _I32.unpack_from(data, pos)[0]
        pos += 4
        if length < 0 or pos + length > len(data):
            raise ValueError("range bound runs past the end")
        texts.append(_quoted_field(bound(data[pos : pos + length]), _RANGE_SPECIAL))
        pos += length
    if pos != len(data):
        raise ValueError("trailing bytes after the range bounds")
    lower = "[" if flags & _RANGE_LB_INC else "("
    upper = "]" if flags & _RANGE_UB_INC else ")"
    return f"{lower}{texts[0]},{texts[1]}{upper}"


def multirange_text(data: bytes, range_reader: Reader) -> str:
    """``multirange_out`` of a ``multirange_send`` value: int32 count, then each range as
    int32 length and its ``range_send`` bytes; printed ``{range,range}``."""
    count = _I32.unpack_from(data)[0]
    pos = 4
    parts: list[str] = []
    for _ in range(count):
        length = _I32.unpack_from(data, pos)[0]
        pos += 4
        if length < 0 or pos + length > len(data):
            raise ValueError("range runs past the end of the multirange")
        parts.append(range_reader(data[pos : pos + length]))
        pos += length
    if pos != len(data):
        raise ValueError("trailing bytes after the ranges")
    return "{" + ",".join(parts) + "}"


def _vector(data: bytes) -> str:
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


# --- the builtin table -----------------------------------------------------------------------

BUILTIN_LEAVES: Final[Mapping[int, Reader]] = {
    16: _bool,
    790: _money,
    17: _bytea,
    18: _char,
    19: _utf8,  # name
    20: _int_reader(_I64),
    21: _int_reader(_I16),
    22: _vector,  # int2vector
    23: _int_reader(_I32),
    25: _utf8,  # text
    26: _unsigned,  # oid
    27: _tid,
    28: _unsigned,  # xid
    29: _unsigned,  # cid
    30: _vector,  # oidvector
    114: _utf8,  # json
    142: _utf8,  # xml, sent in the client encoding
    600: _point,
    601: _lseg,
    602: _path,
    603: _box,
    604: _polygon,
    628: _line,
    650: _inet,  # cidr
    700: _float4,
    701: _float8,
    718: _circle,
    774: _mac(8),
    829: _mac(6),
    869: _inet,
    1042: _utf8,  # bpchar, padding included
    1043: _utf8,  # varchar
    1082: _date,
    1083: _time,
    1114: _timestamp,
    1184: _timestamptz,
    1186: _interval,
    1266: _timetz,
    1560: _bits,
    1562: _bits,  # varbit
    1700: _numeric,
    2950: _uuid,
    2970: _snapshot,  # txid_snapshot
    3220: _lsn,
    3802: _versioned_text,  # jsonb
    4072: _versioned_text,  # jsonpath
    5038: _snapshot,  # pg_snapshot
    5069: _unsigned,  # xid8
}
"""Builtin type OID -> reader, for the types whose binary layout this module ports."""

_NAME_BY_OID: Final = (
    "its binary form is an OID, and its text form the name the catalog gives that OID"
)
BUILTIN_UNREADABLE: Final[Mapping[int, str]] = {
    **dict.fromkeys((24, 2202, 2203, 2204, 2205, 2206, 3734, 3769, 4089, 4096, 4191), _NAME_BY_OID),
}
"""Builtin types whose text form cannot be printed from their binary form, and why."""

BOX_OID: Final = 603
_BUILTIN_ARRAYS: Final[Mapping[int, int]] = {
    info.array_oid: info.oid for info in postgres.types if info.array_oid
}
_BUILTIN_RANGES: Final[Mapping[int, int]] = {
    info.oid: info.subtype_oid for info in postgres.types if isinstance(info, RangeInfo)
}
_BUILTIN_MULTIRANGES: Final[Mapping[int, int]] = {
    info.oid: info.range_oid for info in postgres.types if isinstance(info, MultirangeInfo)
}
_BUILTIN_NAMES: Final[Mapping[int, str]] = {
    oid: name
    for info in postgres.types
    for oid, name in ((info.oid, info.name), (info.array_oid, f"{info.name}[]"))
    if oid
}


def builtin_type_name(type_oid: int) -> str:
    """``pg_catalog.<name>`` of a builtin type psycopg knows, else ``type OID <n>``."""
    name = _BUILTIN_NAMES.get(type_oid)
    return f"pg_catalog.{name}" if name is not None else f"type OID {type_oid}"


def element_delimiter(type_oid: int) -> str:
    """``typdelim`` of a builtin type: ``;`` for box, ``,`` for every other one."""
    return ";" if type_oid == BOX_OID else ","


def builtin_text_reader(type_oid: int) -> Reader | None:
    """The reader of a builtin type, its arrays, ranges and multiranges; None when unknown.

    Containers resolve the types inside them by OID at each value, which for builtin
    containers always names a builtin type; one without a reader raises
    ``UnknownBinaryFormatError``.
    """
    leaf = BUILTIN_LEAVES.get(type_oid)
    if leaf is not None:
        return leaf
    element = _BUILTIN_ARRAYS.get(type_oid)
    if element is not None and _resolvable(element):
        delimiter = element_delimiter(element)

        def read_array(data: bytes) -> str:
            return array_text(data, require_builtin_reader, delimiter)

        return read_array
    subtype = _BUILTIN_RANGES.get(type_oid)
    if subtype is not None and subtype in BUILTIN_LEAVES:
        bound = BUILTIN_LEAVES[subtype]

        def read_range(data: bytes) -> str:
            return range_text(data, bound)

        return read_range
    range_oid = _BUILTIN_MULTIRANGES.get(type_oid)
    if range_oid is not None:
        read_one = builtin_text_reader(range_oid)
        if read_one is not None:
            one = read_one

            def read_multirange(data: bytes) -> str:
                return multirange_text(data, one)

            return read_multirange
    return None


def _resolvable(type_oid: int) -> bool:
    return (
        type_oid in BUILTIN_LEAVES
        or type_oid in _BUILTIN_RANGES
        or (type_oid in _BUILTIN_MULTIRANGES)
    )


def require_builtin_reader(type_oid: int) -> Reader:
    """``builtin_text_reader``, raising ``UnknownBinaryFormatError`` instead of None."""
    reader = builtin_text_reader(type_oid)
    if reader is None:
        raise UnknownBinaryFormatError(
            builtin_type_name(type_oid), "wal2delta knows no binary layout for it"
        )
    return reader
