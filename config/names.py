"""PostgreSQL object names in the configuration: tables, columns, slots, publications.

Names are the *exact* catalog names, case-sensitive, as ``\\dt`` prints them: the
daemon always quotes identifiers (``psycopg.sql.Identifier``), so ``public.Orders`` means
the table whose name is ``Orders``, not ``orders``. We do not fold unquoted names to lower
case as SQL does, because the same names also appear unquoted in metric labels and column
lists, and one rule everywhere is easier to get right than SQL's two.

A table is ``schema.table`` or just ``table`` (schema ``public``). A part that itself
contains a dot or a double quote is written in double quotes with ``""`` for a quote,
as in SQL: ``"sales.eu".orders`` or ``public."say ""hi"" table"``. ``format_table_name``
writes the canonical form back, quoting only such parts, so ``public.orders`` stays
readable and round-trips.

PostgreSQL truncates identifiers to ``NAMEDATALEN - 1 = 63`` bytes; a longer name in the
configuration would silently name a different object, so it is an error here.
"""

from __future__ import annotations

import re
from typing import Final

#: NAMEDATALEN - 1: the longest identifier PostgreSQL keeps, in bytes.
MAX_IDENTIFIER_BYTES: Final = 63

#: Replication slot names: lower-case letters, digits and underscore
#: (``ReplicationSlotValidateName`` in slot.c).
SLOT_NAME: Final = re.compile(r"[a-z0-9_]{1,63}")

DEFAULT_SCHEMA: Final = "public"


def check_identifier(name: str, *, what: str = "name") -> str:
    """Check that ``name`` can be a PostgreSQL identifier as written.

    Args:
        name: the exact identifier.
        what: what the name is, for the message ("column name", "publication name").

    Returns:
        ``name`` unchanged.

    Raises:
        ValueError: empty, longer than 63 bytes, or containing a NUL character.
    """
    if not name:
        raise ValueError(f"{what} must not be empty")
    if "\0" in name:
        raise ValueError(f"{what} must not contain a NUL character")
    size = len(name.encode())
    if size > MAX_IDENTIFIER_BYTES:
        raise ValueError(
            f"{what} {name!r} is {size} bytes long; PostgreSQL keeps only "
            f"{MAX_IDENTIFIER_BYTES} bytes and would silently truncate it"
        )
    return name


def check_slot_name(name: str) -> str:
    """Check a replication slot name against PostgreSQL's rule.

    Args:
        name: the slot name.

    Returns:
        ``name`` unchanged.

    Raises:
        ValueError: not 1 to 63 characters of ``a-z``, ``0-9`` and ``_``.
    """
    if SLOT_NAME.fullmatch(name) is None:
        raise ValueError(
            f"invalid replication slot name {name!r}: use 1 to 63 lower-case letters, "
            "digits and underscores"
        )
    return name


def parse_table_name(text: str) -> tuple[str, str]:
    """Split ``schema.table`` (or ``table``) into its exact schema and table names.

    Args:
        text: the name as written in the configuration.

    Returns:
        ``(schema, table)``; the schema is ``public`` when omitted.

    Raises:
        ValueError: empty parts, unbalanced quotes, more than two parts, or a part
            that is not a valid identifier.
    """
    parts: list[str] = []
    position = 0
    length = len(text)
    while True:
        if position < length and text[position] == '"':
            part, position = _quoted_part(text, position)
        else:
            end = text.find(".", position)
            end = length if end == -1 else end
            part = text[position:end]
            if '"' in part:
                raise ValueError(f"invalid table name {text!r}: a quote may only open a name part")
            if part != part.strip():
                raise ValueError(
                    f"invalid table name {text!r}: a name part starts or ends with a space; "
                    "put it in double quotes if the name really does"
                )
            position = end
        parts.append(part)
        if position == length:
            break
        if text[position] != ".":
            raise ValueError(f"invalid table name {text!r}: expected '.' after a quoted part")
        position += 1
        if position == length:
            parts.append("")
            break
    if len(parts) > 2:
        raise ValueError(
            f"invalid table name {text!r}: use schema.table, and double quotes around a "
            "part that contains a dot"
        )
    if len(parts) == 1:
        parts.insert(0, DEFAULT_SCHEMA)
    schema, table = parts
    check_identifier(schema, what=f"schema name in {text!r}")
    check_identifier(table, what=f"table name in {text!r}")
    return schema, table


def _quoted_part(text: str, start: int) -> tuple[str, int]:
    """Read a double-quoted part starting at ``start``; return it and the next position."""
    chars: list[str] = []
    position = start + 1
    while position < len(text):
        char = text[position]
        if char == '"':
            if text[position + 1 : position + 2] == '"':
                chars.append('"')
                position += 2
                continue
            return "".join(chars), position + 1
        chars.append(char)
        position += 1
    raise ValueError(f"invalid table name {text!r}: unterminated double quote")


def _format_part(part: str) -> str:
    if "." in part or '"' in part or not part:
        return '"' + part.replace('"', '""') + '"'
    return part


def format_table_name(schema: str, table: str) -> str:
    """Write the canonical ``schema.table`` that ``parse_table_name`` reads back.

    Args:
        schema: exact schema name.
        table: exact table name.

    Returns:
        ``schema.table``, with a part quoted only when it contains a dot or a quote.
    """
    return f"{_format_part(schema)}.{_format_part(table)}"


def normalize_table_name(text: str) -> str:
    """Parse a table name and return its canonical form (``orders`` -> ``public.orders``).

    Args:
        text: the name as written.

    Returns:
        The canonical ``schema.table``.

    Raises:
        ValueError: see ``parse_table_name``.
    """
    return format_table_name(*parse_table_name(text))
