"""Numbers: integers, ``float4``/``float8`` (Ryu's shortest digits), numeric and money.

Binary readers (``read_*``, ``int_reader``) and the printers they share with Python values
(``float8_text``, ``decimal_text``), as PostgreSQL's output functions print them.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Context, Decimal
from typing import Final

from decoder.textforms.base import F64, I64, Reader


def int_reader(layout: struct.Struct) -> Reader:
    def read(data: bytes) -> str:
        return str(layout.unpack(data)[0])

    return read


def read_unsigned(data: bytes) -> str:
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


def read_float4(data: bytes) -> str:
    return float4_text(struct.unpack(">f", data)[0])


def read_float8(data: bytes) -> str:
    return float8_text(F64.unpack(data)[0])


_NUMERIC_POS: Final = 0x0000
_NUMERIC_NEG: Final = 0x4000
_NUMERIC_NAN: Final = 0xC000
_NUMERIC_PINF: Final = 0xD000
_NUMERIC_NINF: Final = 0xF000
_NUMERIC_SPECIALS: Final = {
    _NUMERIC_NAN: "NaN",
    _NUMERIC_PINF: "Infinity",
    _NUMERIC_NINF: "-Infinity",
}


def read_numeric(data: bytes) -> str:
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


def read_money(data: bytes) -> str:
    """``cash_out`` under ``lc_monetary C``: ``$`` first, ``,`` every three digits, two
    fraction digits, ``-`` before the symbol."""
    cents = I64.unpack(data)[0]
    whole, fraction = divmod(abs(cents), 100)
    sign = "-" if cents < 0 else ""
    return f"{sign}${whole:,}.{fraction:02d}"


def decimal_text(value: Decimal) -> str:
    """``numeric_out`` of a numeric loaded as a ``Decimal``: its digits at its own scale,
    never an exponent; NaN and the infinities as ``read_numeric`` prints them."""
    if value.is_nan():
        return _NUMERIC_SPECIALS[_NUMERIC_NAN]
    if value.is_infinite():
        return _NUMERIC_SPECIALS[_NUMERIC_NINF if value < 0 else _NUMERIC_PINF]
    return format(value, "f")
