"""Network addresses: inet, cidr (``inet_net_ntop``), macaddr and macaddr8.

Binary readers and ``ip_text``, which prints the ``ipaddress`` values psycopg loads with the
same code.
"""

from __future__ import annotations

import ipaddress
import struct
from typing import Final

from decoder.textforms.base import Reader, exact

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


def inet_text(address: bytes, bits: int, is_cidr: bool) -> str:
    """``inet_out``/``cidr_out``: a 4-byte (IPv4) or 16-byte (IPv6) address, then ``/bits``
    unless it is an inet of all the address's bits."""
    if len(address) == 4:
        text, full = ".".join(str(b) for b in address), 32
    elif len(address) == 16:
        text, full = _ipv6_text(address), 128
    else:
        raise ValueError("unknown inet address family")
    if not 0 <= bits <= full:
        raise ValueError("invalid inet mask")
    return text + (f"/{bits}" if bits != full or is_cidr else "")


def read_inet(data: bytes) -> str:
    """``inet_out``/``cidr_out`` from ``inet_send``: family, bits, is_cidr, length, address."""
    family, bits, is_cidr, size = data[0], data[1], data[2], data[3]
    address = exact(data[4:], size)
    if (family, size) not in {(_PGSQL_AF_INET, 4), (_PGSQL_AF_INET6, 16)}:
        raise ValueError("unknown inet address family")
    if is_cidr not in {0, 1}:
        raise ValueError("invalid inet mask")
    return inet_text(address, bits, bool(is_cidr))


IpValue = (
    ipaddress.IPv4Address
    | ipaddress.IPv6Address
    | ipaddress.IPv4Interface
    | ipaddress.IPv6Interface
    | ipaddress.IPv4Network
    | ipaddress.IPv6Network
)
"""What psycopg loads inet (an address, or an interface when it has a mask) and cidr
(a network) as."""


def ip_text(value: IpValue) -> str:
    """An ``ipaddress`` value as ``inet_out`` (an address or interface) or ``cidr_out`` (a
    network) prints it - IPv4-mapped IPv6 addresses in dotted form, unlike ``str``."""
    match value:
        case ipaddress.IPv4Network() | ipaddress.IPv6Network():
            return inet_text(value.network_address.packed, value.prefixlen, True)
        case ipaddress.IPv4Interface() | ipaddress.IPv6Interface():
            return inet_text(value.packed, value.network.prefixlen, False)
    return inet_text(value.packed, value.max_prefixlen, False)


def mac_reader(size: int) -> Reader:
    def read(data: bytes) -> str:
        return ":".join(f"{b:02x}" for b in exact(data, size))

    return read
