"""Where a table lands in the lake, and what its columns are called in Delta (pure).

Theory of operation
-------------------
PostgreSQL allows any character but NUL in a quoted identifier (``"Sales EU"``,
``"заказы"``, ``"a`b"``, ``"unit price"``); the places wal2delta writes to do not:

* **Lake locations.** A table's location is ``<root>/<schema part>/<table part>``, and
  every engine that touches it parses it as a URL or an object-store path. Sail 0.7
  percent-encodes a space, ``%``, ``~``, ``#``, ``"``, a backtick, a backslash and every
  non-ASCII character when it creates the table, then looks for the unencoded name (or
  encodes it twice) when it reads or merges - the table is "not found". It treats ``?``,
  ``*`` and ``[`` as glob characters and writes *above* the table. object_store (delta-rs)
  encodes a similar set, and S3 recommends avoiding more. So every location part uses
  only ``A-Z a-z 0-9 _ - .``, which no engine re-encodes.
* **Delta column names.** A Delta table without column mapping cannot hold a column
  whose name contains a space or one of ``,;{}()=``, a tab or a newline (the
  characters Parquet and Spark's Delta reject). Delta's column mapping would keep such
  names, but Sail 0.7 enables it only when it creates a table (never on an existing one,
  where a column with such a name may be added later) and delta-rs 1.6 refuses to read
  such tables into Arrow. So ``sink.column_names: map`` gives such a column another
  name in Delta (``SinkSettings.column_names``); ``error`` (the default) refuses it.

Both use one reversible escape, the one SQL/XML (ISO/IEC 9075-14) and .NET's
``XmlConvert.EncodeName`` use for the same problem: a character that cannot stay becomes
``_xHHHH_`` (its code point in four upper-case hex digits; ``_xHHHHHHHH_`` above U+FFFF).
A space is ``_x0020_``, so ``Sales EU`` lands in ``Sales_x0020_EU`` and ``unit price`` is
the column ``unit_x0020_price``. Everything else stays as it is, so names made of the safe
characters - nearly all names - keep their location and their column name, and lakes
written before keep working.

The escape is reversible only if a literal ``_`` is never read back as one: an
underscore that would be (``_`` followed by ``x``, four or eight upper-case hex digits
and then ``_`` or a character that gets escaped) is itself escaped as ``_x005F_``. Hence
the encoding is injective - two different names never share a location or a Delta column
- and ``decode`` undoes it; ``table_of_path`` and ``source_column_name`` accept only what
the encoding produces. A location part never starts with ``.`` (so ``.``, ``..`` and
hidden names are escaped: ``_x002E_``), and a part that would collide with the lake's
own entries - ``_delta_log``, or a name starting with ``_wal2delta`` like the messages and
snapshot tables at the root - has its first ``_`` escaped.

Not handled, on purpose: names that differ only in case share a location on a
case-insensitive file system (macOS, Windows); object stores and Linux file systems are
case-sensitive, and escaping upper-case letters would move every existing table with one.
A part can grow to 7 characters per escaped character (a 63-byte name of spaces: 441),
beyond the 255 bytes local file systems allow in one name; object stores have no such
limit. Delta column names that differ only in case are refused (``plan.py``): Spark
resolves columns case-insensitively, and no map that depends on the name alone can keep
``Id`` and ``id`` apart without renaming every mixed-case column.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from sink.constants import HISTORY_SUFFIX, STAGING_PREFIX, ColumnNamePolicy

_HEX: Final = frozenset("0123456789ABCDEF")
_PATH_SAFE: Final = frozenset(string.ascii_letters + string.digits + "_-.")
DELTA_INVALID_CHARACTERS: Final = frozenset(" ,;{}()\n\t=")
"""Characters a Delta column name cannot hold without column mapping."""

_LAKE_ENTRIES: Final = ("_delta_log", "_wal2delta")
"""A location part equal to the first or starting with the second gets its ``_`` escaped."""


def _escape(char: str) -> str:
    code = ord(char)
    return f"_x{code:04X}_" if code <= 0xFFFF else f"_x{code:08X}_"


def _read_escape(text: str, start: int) -> tuple[str, int] | None:
    """The character escaped at ``start`` and the escape's length, or None if none is."""
    if not text.startswith("_x", start):
        return None
    for width in (4, 8):
        digits = text[start + 2 : start + 2 + width]
        if len(digits) < width or not _HEX.issuperset(digits):
            return None
        if text[start + 2 + width : start + 3 + width] == "_":
            code = int(digits, 16)
            return (chr(code), width + 3) if code <= 0x10FFFF else None
    return None


def _reads_as_escape(name: str, index: int, kept: Callable[[str], bool]) -> bool:
    """Whether a literal ``_`` at ``index`` would be read back as the start of an escape.

    What follows the ``_`` in the encoded text is ``x`` and hex digits as they are (they
    are always kept), then either ``_`` or the escape of a character that is not kept -
    which starts with ``_`` too.
    """
    if name[index + 1 : index + 2] != "x":
        return False
    for width in (4, 8):
        digits = name[index + 2 : index + 2 + width]
        if len(digits) < width or not _HEX.issuperset(digits):
            return False
        after = name[index + 2 + width : index + 3 + width]
        if after == "_" or (after != "" and not kept(after)):
            return True
    return False


def _encode(name: str, kept: Callable[[str], bool], escape_first: bool = False) -> str:
    out: list[str] = []
    for index, char in enumerate(name):
        if (
            not kept(char)
            or (index == 0 and escape_first)
            or (char == "_" and _reads_as_escape(name, index, kept))
        ):
            out.append(_escape(char))
        else:
            out.append(char)
    return "".join(out)


def decode(text: str) -> str:
    """Undo the escapes of a location part or a mapped column name (see the module doc).

    Text that is not an encoding (``encode`` would not produce it) decodes to something,
    but ``path_part(decode(text)) != text``; the checked inverses below return None.
    """
    out: list[str] = []
    index = 0
    while index < len(text):
        escaped = _read_escape(text, index) if text[index] == "_" else None
        if escaped is None:
            out.append(text[index])
            index += 1
        else:
            out.append(escaped[0])
            index += escaped[1]
    return "".join(out)


# --- lake locations --------------------------------------------------------------------------


def _path_kept(char: str) -> bool:
    return char in _PATH_SAFE


def path_part(name: str) -> str:
    """The location part of a schema or table name: safe ASCII, reversible.

    ``public`` -> ``public``, ``Sales EU`` -> ``Sales_x0020_EU``, ``..`` ->
    ``_x002E_.``, ``a/b`` -> ``a_x002F_b``.
    """
    first_escaped = name.startswith(".") or name == _LAKE_ENTRIES[0]
    first_escaped = first_escaped or name.startswith(_LAKE_ENTRIES[1])
    return _encode(name, _path_kept, escape_first=first_escaped)


def name_of_path_part(part: str) -> str | None:
    """The schema or table name whose location part is ``part``; None for other text."""
    name = decode(part)
    return name if name and path_part(name) == part else None


def table_path(root: str, schema: str, table: str) -> str:
    """Where the Delta table of ``schema.table`` lives: ``<root>/<schema part>/<table part>``.

    The one function every writer and reader of the lake uses (the sink, ``status``,
    ``verify``, the demo, benchmarks and tests). ``root`` is a local path or a URL
    (``s3://bucket/lake``) and is used as it is.
    """
    return f"{root.rstrip('/')}/{path_part(schema)}/{path_part(table)}"


def staging_path(root: str, schema: str, table: str, lsn: int) -> str:
    """Where the copy of ``schema.table`` made at ``lsn`` is written before it replaces the
    table (``copies.py``, ``adoption.py``): ``<table path>/wal2delta-copy-<lsn>``."""
    return f"{table_path(root, schema, table)}/{STAGING_PREFIX}{lsn:016X}"


def table_of_path(root: str, path: str) -> tuple[str, str] | None:
    """``(schema, table)`` whose ``table_path`` under ``root`` is ``path``, else None.

    The inverse of ``table_path``, for listing a lake: a directory that no table name
    maps to (another tool's, or the lake's own ``_wal2delta_*`` tables) gives None.
    """
    prefix = root.rstrip("/") + "/"
    if not path.startswith(prefix):
        return None
    parts = path[len(prefix) :].rstrip("/").split("/")
    if len(parts) != 2:  # schema and table
        return None
    schema, table = (name_of_path_part(part) for part in parts)
    if schema is None or table is None:
        return None
    return schema, table


# --- Delta column names ------------------------------------------------------------------------


def _column_kept(char: str) -> bool:
    return char not in DELTA_INVALID_CHARACTERS


def delta_can_hold(name: str) -> bool:
    """Whether a Delta table without column mapping can hold a column named ``name``."""
    return DELTA_INVALID_CHARACTERS.isdisjoint(name)


def mapped_column_name(name: str) -> str:
    """The Delta name of a source column under ``sink.column_names: map``.

    ``unit price`` -> ``unit_x0020_price``, ``f(x)`` -> ``f_x0028_x_x0029_``; a name
    Delta can hold and that does not look like an escape stays as it is.
    """
    return _encode(name, _column_kept)


def delta_column_name(name: str, policy: ColumnNamePolicy) -> str:
    """The Delta name of a source column: itself, or ``mapped_column_name`` under ``map``.

    Under ``error`` a name Delta cannot hold is returned unchanged; the planner refuses it.
    """
    return mapped_column_name(name) if policy == "map" else name


def source_column_name(delta_name: str) -> str | None:
    """The source column whose ``mapped_column_name`` is ``delta_name``; None if none is."""
    name = decode(delta_name)
    return name if mapped_column_name(name) == delta_name else None


def column_map(names: Iterable[str], policy: ColumnNamePolicy) -> Mapping[str, str]:
    """Source name -> Delta name for each of ``names`` whose Delta name differs."""
    out: dict[str, str] = {}
    for name in names:
        delta = delta_column_name(name, policy)
        if delta != name:
            out[name] = delta
    return out


def history_path(root: str, schema: str, table: str) -> str:
    """Where the change history of ``schema.table`` lives (``<table>__changes``)."""
    return table_path(root, schema, table + HISTORY_SUFFIX)


def history_name(qualified_name: str) -> str:
    """The name ``wal2delta cut`` and the commit log give a table's history."""
    return qualified_name + HISTORY_SUFFIX
