"""Other pgoutput slots of the source database that may stream the tables we stream.

Several daemons may share one source - each with its own slot and a publication of
disjoint tables - when one daemon's decoding is the limit (docs/operations.md, "Several
daemons per source"). Two daemons that stream the same table both write it.
``wal2delta status`` reads here what the server can tell about that, on a normal
connection, once.

What the server records, and what it does not:

- ``pg_replication_slots`` lists every logical slot with its plugin and database, and the
  process streaming from it (``active_pid``); it does not record which publications a
  slot streams: a consumer names them anew at each ``START_REPLICATION``.
- While a slot is streamed, its walsender is in ``pg_stat_activity``: its
  ``application_name`` (``wal2delta`` for the daemon's replication connection) and, as
  ``query``, the last replication command it ran - the ``START_REPLICATION`` that names the
  publications (``publication_names``). The query text is shown only to the walsender's
  role, a superuser or a member of ``pg_read_all_stats``, and only up to
  ``track_activity_query_size`` bytes.
- ``pg_publication_tables`` lists the tables of every publication of the database.

So, for each table our publications publish, another slot is:

- *confirmed* to stream it when its walsender is a wal2delta one and its
  ``START_REPLICATION`` names a publication that publishes the table (ours, or another);
- *possibly* streaming it when it is not streamed right now (or its command cannot be
  read) and a publication other than ours publishes the table: whatever streams that slot
  next may name that publication. A slot whose walsender is not a wal2delta one (another
  tool's subscription) does not write Delta and is left out.

What it cannot tell: which publications an idle slot is streamed with - an idle slot that
a second daemon streams with *our own* publication is not reported; and whether a slot
that another tool uses while idle belongs to wal2delta. Slots of other databases stream
other tables and are not looked at.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from capture.slots import parse_slot_list

OWN_APPLICATION_NAME = "wal2delta"
"""The ``application_name`` of the daemon's replication connection (``ReplicationStream``)."""

_PUBLICATION_NAMES = re.compile(
    r"""(?:"publication_names"|\bpublication_names)\s+'((?:[^']|'')*)'"""
)
"""The ``publication_names`` option of a ``START_REPLICATION`` command: quoted or not, its
value a string literal (``''`` a quote)."""


@dataclass(frozen=True, slots=True)
class OtherSlot:
    """A pgoutput slot of the database other than ours.

    Attributes:
        name: the slot.
        active_pid: its walsender while streamed, else None.
        application_name: the walsender's ``application_name`` (None while idle).
        publications: the publications its walsender's ``START_REPLICATION`` names; None
            when not known (idle, or the command is not readable by this role).
    """

    name: str
    active_pid: int | None
    application_name: str | None
    publications: tuple[str, ...] | None

    @property
    def wal2delta(self) -> bool | None:
        """A wal2delta daemon streams it; None while idle (nobody can tell)."""
        if self.active_pid is None:
            return None
        return self.application_name == OWN_APPLICATION_NAME


@dataclass(frozen=True, slots=True)
class Overlap:
    """A table we stream that another slot streams, or may stream.

    Attributes:
        table: ``schema.table``.
        publications: the publications that publish it - ours first - as far as they
            matter: ours, and the others' that the other slots stream or may stream.
        slots: our slot first, then the other slots.
        confirmed: the other slots a wal2delta walsender streams with a publication of
            this table right now; the rest may stream it (idle, a publication of it exists).
    """

    table: str
    publications: tuple[str, ...]
    slots: tuple[str, ...]
    confirmed: tuple[str, ...]


Conn = psycopg.Connection[tuple[object, ...]]


def publication_names_of(command: str | None) -> tuple[str, ...] | None:
    """The publications a ``START_REPLICATION`` command names; None when it names none."""
    if not command or "START_REPLICATION" not in command.upper():
        return None
    match = _PUBLICATION_NAMES.search(command)
    if match is None:
        return None
    return tuple(parse_slot_list(match[1].replace("''", "'")))


def other_pgoutput_slots(conn: Conn, own_slot: str) -> list[OtherSlot]:
    """The pgoutput slots of the connected database other than ``own_slot``, by name."""
    rows = conn.execute(
        """
        SELECT s.slot_name, s.active_pid, a.application_name, a.query
        FROM pg_replication_slots s
        LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid
        WHERE s.plugin = 'pgoutput' AND s.database = current_database()
          AND s.slot_type = 'logical' AND s.slot_name <> %s AND NOT s.temporary
        ORDER BY s.slot_name
        """,
        (own_slot,),
    ).fetchall()
    return [
        OtherSlot(
            name=str(name),
            active_pid=None if pid is None else int(str(pid)),
            application_name=None if pid is None or app is None else str(app),
            publications=None if pid is None else publication_names_of(_text(query)),
        )
        for name, pid, app, query in rows
    ]


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def publishers(conn: Conn, tables: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each ``schema.table`` of ``tables`` -> every publication of the database that
    publishes it, by name (``pg_publication_tables``: ``FOR ALL TABLES`` and ``TABLES IN
    SCHEMA`` expanded; a partition published via its root appears as the root)."""
    if not tables:
        return {}
    rows = conn.execute(
        """
        SELECT schemaname || '.' || tablename, array_agg(pubname::text ORDER BY pubname)
        FROM pg_publication_tables
        WHERE schemaname || '.' || tablename = ANY(%s)
        GROUP BY 1
        """,
        (list(tables),),
    ).fetchall()
    return {str(table): tuple(str(p) for p in _list(pubs)) for table, pubs in rows}


def _list(value: object) -> list[object]:
    assert isinstance(value, list)
    return value


def find_overlaps(
    conn: Conn, own_slot: str, own_publications: Sequence[str], tables: Sequence[str]
) -> list[Overlap]:
    """The tables of ``tables`` (those our publications publish) that another pgoutput
    slot of this database streams or may stream (see the module docstring), by table."""
    others = [slot for slot in other_pgoutput_slots(conn, own_slot) if slot.wal2delta is not False]
    if not others:
        return []
    ours = set(own_publications)
    overlaps = []
    for table, pubs in sorted(publishers(conn, tables).items()):
        foreign = [p for p in pubs if p not in ours]
        involved: list[str] = []
        confirmed: list[str] = []
        named: set[str] = set()
        for slot in others:
            if slot.publications is not None:
                streamed = [p for p in slot.publications if p in pubs]
                if streamed:
                    confirmed.append(slot.name)
                    involved.append(slot.name)
                    named.update(streamed)
            elif foreign:
                involved.append(slot.name)
                named.update(foreign)
        if involved:
            own = [p for p in own_publications if p in pubs]
            publications = own + sorted(named - set(own))
            overlaps.append(
                Overlap(table, tuple(publications), (own_slot, *involved), tuple(confirmed))
            )
    return overlaps
