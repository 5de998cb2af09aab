"""The builtin types: which reader prints each one, resolved from psycopg's registry.

``BUILTIN_LEAVES`` maps each builtin leaf type to its family's reader;
``builtin_text_reader`` adds the builtin arrays, ranges and multiranges of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from psycopg import postgres
from psycopg.types.multirange import MultirangeInfo
from psycopg.types.range import RangeInfo

from decoder.textforms import datetime, geometric, misc, network, numeric
from decoder.textforms.base import I16, I32, I64, Reader, UnknownBinaryFormatError
from decoder.textforms.containers import array_text, multirange_text, range_text

BUILTIN_LEAVES: Final[Mapping[int, Reader]] = {
    16: misc.read_bool,
    790: numeric.read_money,
    17: misc.read_bytea,
    18: misc.read_char,
    19: misc.read_utf8,  # name
    20: numeric.int_reader(I64),
    21: numeric.int_reader(I16),
    22: misc.read_vector,  # int2vector
    23: numeric.int_reader(I32),
    25: misc.read_utf8,  # text
    26: numeric.read_unsigned,  # oid
    27: misc.read_tid,
    28: numeric.read_unsigned,  # xid
    29: numeric.read_unsigned,  # cid
    30: misc.read_vector,  # oidvector
    114: misc.read_utf8,  # json
    142: misc.read_utf8,  # xml, sent in the client encoding
    600: geometric.read_point,
    601: geometric.read_lseg,
    602: geometric.read_path,
    603: geometric.read_box,
    604: geometric.read_polygon,
    628: geometric.read_line,
    650: network.read_inet,  # cidr
    700: numeric.read_float4,
    701: numeric.read_float8,
    718: geometric.read_circle,
    774: network.mac_reader(8),
    829: network.mac_reader(6),
    869: network.read_inet,
    1042: misc.read_utf8,  # bpchar, padding included
    1043: misc.read_utf8,  # varchar
    1082: datetime.read_date,
    1083: datetime.read_time,
    1114: datetime.read_timestamp,
    1184: datetime.read_timestamptz,
    1186: datetime.read_interval,
    1266: datetime.read_timetz,
    1560: misc.read_bits,
    1562: misc.read_bits,  # varbit
    1700: numeric.read_numeric,
    2950: misc.read_uuid,
    2970: misc.read_snapshot,  # txid_snapshot
    3220: misc.read_lsn,
    3802: misc.read_versioned_text,  # jsonb
    4072: misc.read_versioned_text,  # jsonpath
    5038: misc.read_snapshot,  # pg_snapshot
    5069: numeric.read_unsigned,  # xid8
}
"""Builtin type OID -> reader, for the types whose binary layout the families port."""

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
