"""Publication and replication slot administration, and the start-up catalog checks.

Everything here runs once at start-up on a regular (non-replication) connection; nothing
queries the catalog while decoding. SQL is composed with ``psycopg.sql`` so identifiers are
always quoted.

Several publications
--------------------
``source.publication`` may name several publications, as a subscription's
``publication_names`` does; pgoutput then combines them per table, and
``read_published_tables`` computes the same combination from the catalog, so that the
initial snapshot copies exactly what the server will stream:

- tables: every table any of them publishes (``pg_publication_tables`` of each, which
  already expands ``FOR ALL TABLES`` and ``TABLES IN SCHEMA``). A partition listed by
  one publication whose ancestor another lists (``publish_via_partition_root``) is
  streamed as that ancestor, so only the ancestor is copied - as PostgreSQL 16's
  ``pg_get_publication_tables(VARIADIC text[])`` decides for its table sync;
- row filter (PostgreSQL 15+): the filters of the publications OR'ed, and no filter when
  one of them publishes the table without one (``FOR ALL TABLES`` and ``TABLES IN SCHEMA``
  never have one), as ``fetch_remote_table_info`` in tablesync.c builds it;
- column list (PostgreSQL 15+): pgoutput refuses a table whose column lists differ
  between the publications ("cannot use different column lists"), at the first change of
  that table; we refuse it at start-up instead, naming table and publications. Before
  PostgreSQL 18 generated columns are never published, although ``attnames`` lists them.

PostgreSQL 14 has neither row filters nor column lists: every column, every row.

Failover slots
--------------
On PostgreSQL 17 and newer a logical slot may be a failover slot (``failover = true``): a
physical standby with ``sync_replication_slots = on`` keeps a copy of it, and after a
promotion the consumer continues from that copy. ``source.failover`` decides
(``want_failover``); the slot is created with the option and an existing slot's flag is
changed to match (``ALTER_REPLICATION_SLOT``, a replication command, in
``capture.startup``). What the primary can tell about the standbys that would take over
is read by ``standby_slots``: the physical slots named in ``synchronized_standby_slots``,
for which the walsender of a failover slot waits before it sends a change
(docs/decisions/0107-failover-slots.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import psycopg
from psycopg import sql

from capture.errors import (
    PublicationError,
    ServerCapabilityError,
    SlotInUseError,
    SlotInvalidatedError,
    SlotNotFoundError,
)
from decoder import Lsn, parse_lsn


@dataclass(frozen=True, slots=True)
class PublishedTable:
    """One published table with its row filter and column list (None: all).

    Built from ``source.tables`` (to create the publication) or read back from the
    catalog (``read_published_tables``: what the server streams).
    """

    schema: str
    name: str
    where: str | None = None
    columns: tuple[str, ...] | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass(frozen=True, slots=True)
class SlotState:
    """What ``pg_replication_slots`` says about a slot."""

    name: str
    plugin: str
    database: str
    active_pid: int | None
    confirmed_flush_lsn: Lsn | None
    restart_lsn: Lsn | None
    wal_status: str | None
    two_phase: bool
    safe_wal_size: int | None = None
    """Bytes of WAL that may still be written before the slot is in danger of losing
    what it needs (``max_slot_wal_keep_size``); None when that setting is unlimited."""
    failover: bool | None = None
    """A failover slot (standbys with ``sync_replication_slots`` keep a copy); None before
    PostgreSQL 17."""
    synced: bool | None = None
    """Copied from a primary by a standby's slot synchronization: on a primary, a slot
    it took over at its promotion; None before PostgreSQL 17."""


Conn = psycopg.Connection[tuple[object, ...]]

FAILOVER_SINCE: Final = 170000
"""``server_version_num`` from which slots can be failover slots."""


def want_failover(setting: Literal["auto", "true", "false"], version: int) -> bool:
    """Whether the slot should be a failover slot on a server of ``version``.

    Args:
        setting: ``source.failover``: ``auto`` is on for PostgreSQL 17 and newer.
        version: the server's ``server_version_num``.

    Raises:
        ServerCapabilityError: ``true`` on a server older than PostgreSQL 17.
    """
    if setting == "false":
        return False
    if version >= FAILOVER_SINCE:
        return True
    if setting == "true":
        raise ServerCapabilityError(
            "source.failover: true needs PostgreSQL 17 or newer, and the source runs "
            f"PostgreSQL {version // 10000} (server_version_num {version}). Set "
            "source.failover: auto or false; on this version a slot lost at a failover is "
            "replaced by snapshot.on_slot_loss: resync."
        )
    return False


def server_version(conn: Conn) -> int:
    """Return ``server_version_num`` (e.g. 180001)."""
    row = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
    assert row is not None
    return int(str(row[0]))


def check_server(conn: Conn) -> None:
    """Fail early when the server cannot do logical replication at all."""
    row = conn.execute("SELECT current_setting('wal_level')").fetchone()
    assert row is not None
    if row[0] != "logical":
        raise ServerCapabilityError(
            f"wal_level is {row[0]!r} on the source; set wal_level = logical and restart it."
        )
    if server_version(conn) < 140000:
        raise ServerCapabilityError("wal2delta needs PostgreSQL 14 or newer on the source.")


def wal_sender_timeout_seconds(conn: Conn) -> float:
    """Return the server's ``wal_sender_timeout`` in seconds (0 = disabled)."""
    row = conn.execute(
        "SELECT setting::float8 / 1000 FROM pg_settings WHERE name = 'wal_sender_timeout'"
    ).fetchone()
    return float(str(row[0])) if row is not None else 60.0


SHORT_PAGE_HEADER: Final = 24
"""Bytes of a WAL page's header (``SizeOfXLogShortPHD``, MAXALIGNed on 64-bit servers)."""
LONG_PAGE_HEADER: Final = 40
"""Bytes of the header of a WAL segment's first page (``SizeOfXLogLongPHD``)."""


def wal_end_position(insert_lsn: int, *, block_size: int, segment_size: int) -> Lsn:
    """The end of the last WAL record, from the server's insert position.

    ``pg_current_wal_insert_lsn()`` converts the insert position as the *start* of the
    next record (``XLogBytePosToRecPtr``): when the last record ends exactly at a page
    boundary it reports the boundary plus the next page's header - 24 bytes on, 40 at a
    segment's start. Nothing ever ends there: the flush position stops at the boundary, a
    walsender's ``walEnd`` too, so neither a slot's ``confirmed_flush_lsn`` nor the flush
    position reach that LSN until the server writes another record, which a quiet server
    may not do for as long as anyone waits. The end position (``XLogBytePosToEndRecPtr``)
    is the boundary itself (docs/decisions/0126-the-end-of-the-wal-is-an-end-of-record-position.md).
    """
    if insert_lsn % segment_size == LONG_PAGE_HEADER:
        return Lsn(insert_lsn - LONG_PAGE_HEADER)
    if insert_lsn % block_size == SHORT_PAGE_HEADER:
        return Lsn(insert_lsn - SHORT_PAGE_HEADER)
    return Lsn(insert_lsn)


def current_wal_lsn(conn: Conn) -> Lsn:
    """The server's WAL end: the end of every record written so far (one statement).

    The insert position, not ``pg_current_wal_lsn()`` (the write position): with
    ``synchronous_commit = off`` committed records may still sit in WAL buffers, and the
    write position would not cover them yet. Taken as an end position
    (``wal_end_position``): at a page boundary the insert position is a page header past
    anything the flush position, a walsender or a slot can reach.
    """
    row = conn.execute(
        "SELECT pg_current_wal_insert_lsn()::text, current_setting('wal_block_size')::int,"
        " (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size')"
    ).fetchone()
    assert row is not None
    return wal_end_position(
        parse_lsn(str(row[0])), block_size=int(str(row[1])), segment_size=int(str(row[2]))
    )


def slot_state(conn: Conn, slot: str) -> SlotState | None:
    """Return the slot's state, or None when it does not exist."""
    since_17 = conn.info.server_version >= FAILOVER_SINCE
    failover = sql.SQL("failover, synced" if since_17 else "NULL::bool, NULL::bool")
    row = conn.execute(
        sql.SQL(
            """
            SELECT slot_name, plugin, database, active_pid, confirmed_flush_lsn::text,
                   restart_lsn::text, wal_status, two_phase, safe_wal_size, {}
            FROM pg_replication_slots WHERE slot_name = %s
            """
        ).format(failover),
        (slot,),
    ).fetchone()
    if row is None:
        return None
    return SlotState(
        name=str(row[0]),
        plugin=str(row[1]),
        database=str(row[2]),
        active_pid=int(str(row[3])) if row[3] is not None else None,
        confirmed_flush_lsn=parse_lsn(str(row[4])) if row[4] is not None else None,
        restart_lsn=parse_lsn(str(row[5])) if row[5] is not None else None,
        wal_status=str(row[6]) if row[6] is not None else None,
        two_phase=bool(row[7]),
        safe_wal_size=int(str(row[8])) if row[8] is not None else None,
        failover=bool(row[9]) if row[9] is not None else None,
        synced=bool(row[10]) if row[10] is not None else None,
    )


StandbyState = Literal["ready", "behind", "inactive", "unusable"]


@dataclass(frozen=True, slots=True)
class StandbySlot:
    """A physical slot named in the primary's ``synchronized_standby_slots``.

    The walsender of a failover slot sends a change only once every slot named there has
    received the WAL holding it, so a standby that would take over never lacks what the
    consumer already has. Its ``state``, as the primary sees it:

    - ``ready``: a standby streams from it and has received WAL up to the logical slot's
      confirmed flush position, as its slot synchronization needs before it copies the
      slot's position;
    - ``behind``: a standby streams from it but has not received that much WAL yet;
    - ``inactive``: no standby streams from it (the walsender waits for it: streaming
      stalls once it passes the slot's position);
    - ``unusable``: no such slot, a logical slot, or invalidated (the walsender waits for
      ever and warns in the server log).

    Whether the standby keeps a copy of our slot (``sync_replication_slots``,
    ``hot_standby_feedback``, ``dbname`` in its ``primary_conninfo``) the primary cannot
    see: the standby's own ``pg_replication_slots`` shows it (``synced``, not
    ``temporary``).
    """

    name: str
    state: StandbyState
    restart_lsn: Lsn | None


def parse_slot_list(text: str) -> list[str]:
    """The slot names of a list setting as PostgreSQL's ``SplitIdentifierString`` reads
    it: comma separated, an unquoted name folded to lower case, ``"..."`` taken exactly
    (``""`` a quote)."""
    names: list[str] = []
    i, size = 0, len(text)
    while i < size:
        while i < size and text[i].isspace():
            i += 1
        if i >= size:
            break
        if text[i] == '"':
            name, i = [], i + 1
            while i < size:
                if text[i] == '"':
                    if i + 1 < size and text[i + 1] == '"':
                        name.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                name.append(text[i])
                i += 1
            names.append("".join(name))
        else:
            start = i
            while i < size and text[i] != "," and not text[i].isspace():
                i += 1
            names.append(text[start:i].lower())
        while i < size and text[i] != ",":
            i += 1
        i += 1  # the comma
    return [name for name in names if name]


def standby_slots(conn: Conn, confirmed_flush: Lsn | None) -> tuple[StandbySlot, ...]:
    """The physical slots named in ``synchronized_standby_slots`` and their state against
    the logical slot's ``confirmed_flush`` (``StandbySlot``); none before PostgreSQL 17 or
    when the setting is empty."""
    if conn.info.server_version < FAILOVER_SINCE:
        return ()
    row = conn.execute("SELECT current_setting('synchronized_standby_slots', true)").fetchone()
    names = parse_slot_list(str(row[0])) if row is not None and row[0] else []
    if not names:
        return ()
    rows = conn.execute(
        """
        SELECT slot_name, slot_type = 'physical' AND invalidation_reason IS NULL, active,
               restart_lsn::text
        FROM pg_replication_slots WHERE slot_name = ANY(%s)
        """,
        (names,),
    ).fetchall()
    found = {str(name): (bool(usable), bool(active), lsn) for name, usable, active, lsn in rows}
    slots = []
    for name in names:
        usable, active, lsn = found.get(name, (False, False, None))
        restart = parse_lsn(str(lsn)) if lsn is not None else None
        state: StandbyState
        if not usable:
            state = "unusable"
        elif not active:
            state = "inactive"
        elif restart is None or (confirmed_flush is not None and restart < confirmed_flush):
            state = "behind"
        else:
            state = "ready"
        slots.append(StandbySlot(name, state, restart))
    return tuple(slots)


def ensure_slot(
    conn: Conn, slot: str, *, create: bool, two_phase: bool, failover: bool
) -> SlotState:
    """Return the usable slot, creating it when allowed; never recreate a lost one.

    A slot created here is a failover slot when ``failover`` (``want_failover``); an
    existing slot is returned as it is (``capture.startup`` changes its flag).

    Raises:
        SlotNotFoundError: missing and ``create`` is false.
        SlotInvalidatedError: the server invalidated the slot (``wal_status = lost``).
        SlotInUseError: another process is streaming from it.
    """
    state = slot_state(conn, slot)
    if state is None:
        if not create:
            raise SlotNotFoundError(
                f"Replication slot {slot!r} does not exist; create it or set "
                "source.create_slot: true."
            )
        if failover:
            conn.execute(
                "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s, true)",
                (slot, two_phase),
            )
        else:
            conn.execute(
                "SELECT pg_create_logical_replication_slot(%s, 'pgoutput', false, %s)",
                (slot, two_phase),
            )
        state = slot_state(conn, slot)
        assert state is not None
        return state
    if state.plugin != "pgoutput":
        raise ServerCapabilityError(
            f"Replication slot {slot!r} uses plugin {state.plugin!r}; wal2delta needs a "
            "pgoutput slot. Choose another slot name."
        )
    if state.wal_status == "lost":
        raise SlotInvalidatedError(
            f"Replication slot {slot!r} was invalidated by the server (wal_status = lost): "
            "WAL it needed is gone, so changes were lost. Re-create the slot with a new "
            "initial snapshot; wal2delta will not do that silently."
        )
    if state.active_pid is not None:
        raise SlotInUseError(
            f"Replication slot {slot!r} is active for PID {state.active_pid}; stop the other "
            "consumer or choose another slot."
        )
    # A slot without two-phase gets it enabled by START_REPLICATION (two_phase 'on'),
    # with two_phase_at at the position streaming starts from (PostgreSQL 15+).
    return state


def _table_clause(table: PublishedTable, version: int) -> sql.Composable:
    parts: list[sql.Composable] = [sql.Identifier(table.schema, table.name)]
    if table.columns:
        if version < 150000:
            raise ServerCapabilityError(
                f"source.tables[].columns of {table.schema}.{table.name}: publication column "
                f"lists need PostgreSQL 15 or newer; the source runs PostgreSQL "
                f"{version // 10000}. Remove the column list, or upgrade the source."
            )
        parts.append(
            sql.SQL("({})").format(sql.SQL(", ").join(sql.Identifier(c) for c in table.columns))
        )
    if table.where:
        if version < 150000:
            raise ServerCapabilityError(
                f"source.tables[].where of {table.schema}.{table.name}: publication row "
                f"filters need PostgreSQL 15 or newer; the source runs PostgreSQL "
                f"{version // 10000}. Remove the row filter, or upgrade the source."
            )
        # The filter is operator-written SQL from the configuration, as in CREATE PUBLICATION.
        parts.append(sql.SQL("WHERE ({})").format(sql.SQL(table.where)))
    return sql.SQL(" ").join(parts)


def require_publications(conn: Conn, publications: Sequence[str], *, hint: str) -> None:
    """Raise ``PublicationError`` naming every one of ``publications`` that does not exist.

    Args:
        conn: a connection to the source database.
        publications: the names to look for.
        hint: what to do about it, the end of the message.
    """
    rows = conn.execute(
        "SELECT pubname FROM pg_publication WHERE pubname = ANY(%s)", (list(publications),)
    ).fetchall()
    found = {str(row[0]) for row in rows}
    missing = [name for name in publications if name not in found]
    if missing:
        names = ", ".join(map(repr, missing))
        subject = f"Publication {names} does" if len(missing) == 1 else f"Publications {names} do"
        raise PublicationError(f"{subject} not exist in the source database; {hint}")


def ensure_publication(
    conn: Conn,
    publications: Sequence[str],
    tables: Sequence[PublishedTable],
    *,
    create: bool,
    via_partition_root: bool,
) -> None:
    """Create the publication, or make its table list match the configuration.

    With ``create`` false, check that every publication exists and that what they
    publish can be streamed (``read_published_tables``); wal2delta creates only one.

    Raises:
        PublicationError: a publication is missing, or the publications publish a table
            with different column lists.
    """
    if not create:
        require_publications(
            conn,
            publications,
            hint="create it, fix source.publication, or set source.create_publication: true.",
        )
        read_published_tables(conn, publications)
        return
    if len(publications) != 1:
        raise PublicationError(
            "source.create_publication creates one publication; "
            f"{len(publications)} are configured."
        )
    (publication,) = publications
    exists = conn.execute(
        "SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)
    ).fetchone()
    version = server_version(conn)
    table_list = sql.SQL(", ").join(_table_clause(t, version) for t in tables)
    options = sql.SQL("publish_via_partition_root = {}").format(sql.Literal(via_partition_root))
    if exists is None:
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WITH ({})").format(
                sql.Identifier(publication), table_list, options
            )
        )
    else:
        conn.execute(
            sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(
                sql.Identifier(publication), table_list
            )
        )
        conn.execute(
            sql.SQL("ALTER PUBLICATION {} SET ({})").format(sql.Identifier(publication), options)
        )


def drop_slot(conn: Conn, slot: str) -> None:
    """Drop ``slot`` if it exists."""
    conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    )


def publication_tables(conn: Conn, publications: Sequence[str]) -> list[str]:
    """Return ``schema.table`` for every table the publications publish.

    For reports (``wal2delta status``): column lists are not checked.
    """
    tables = read_published_tables(conn, publications, check_column_lists=False)
    return [table.qualified_name for table in tables]


@dataclass(frozen=True, slots=True)
class _Entry:
    """One row of ``pg_publication_tables``: a table as one publication publishes it."""

    publication: str
    schema: str
    name: str
    row_filter: str | None
    columns: tuple[str, ...] | None


def _view_has(conn: Conn, column: str) -> bool:
    """Whether ``pg_publication_tables`` has ``column`` (rowfilter, attnames: PG15+)."""
    row = conn.execute(
        "SELECT 1 FROM pg_attribute WHERE attrelid = 'pg_catalog.pg_publication_tables'"
        "::regclass AND attname = %s AND NOT attisdropped",
        (column,),
    ).fetchone()
    return row is not None


def published_table_names(conn: Conn, publications: Sequence[str]) -> tuple[str, ...]:
    """``schema.table`` of every table the publications publish (``read_published_tables``)."""
    return tuple(f"{t.schema}.{t.name}" for t in read_published_tables(conn, publications))


def read_published_tables(
    conn: Conn, publications: Sequence[str], *, check_column_lists: bool = True
) -> list[PublishedTable]:
    """Every table the publications publish, with the row filter and column list the
    server applies to it when streaming them together (see the module docstring).

    Args:
        conn: a connection to the source database; inside the snapshot's transaction
            this reads the publications as the snapshot sees them.
        publications: the publication names, as given to ``START_REPLICATION``.
        check_column_lists: raise when a table's column lists differ; when false, such
            a table gets the first publication's list.

    Returns:
        The tables in ``schema.table`` order; ``columns`` is the exact column list on
        PostgreSQL 15+ (generated columns included only when published), None on 14.

    Raises:
        PublicationError: a table is published with different column lists (and
            ``check_column_lists`` is true).
    """
    version = server_version(conn)
    rowfilter = sql.SQL("pt.rowfilter" if _view_has(conn, "rowfilter") else "NULL::text")
    attnames = sql.SQL("pt.attnames" if _view_has(conn, "attnames") else "NULL::name[]")
    rows = conn.execute(
        sql.SQL(
            """
            SELECT c.oid, pt.pubname, pt.schemaname, pt.tablename, {}, {},
                   CASE WHEN c.relispartition THEN ARRAY(
                       SELECT a.relid::oid FROM pg_partition_ancestors(c.oid) a
                       WHERE a.relid <> c.oid) ELSE '{{}}'::oid[] END,
                   ARRAY(SELECT attname::text FROM pg_attribute
                         WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped
                           AND attgenerated <> '')
            FROM pg_publication_tables pt
            JOIN pg_namespace n ON n.nspname = pt.schemaname
            JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
            WHERE pt.pubname = ANY(%s)
            ORDER BY pt.schemaname, pt.tablename, array_position(%s, pt.pubname::text)
            """
        ).format(rowfilter, attnames),
        (list(publications), list(publications)),
    ).fetchall()
    entries: dict[int, list[_Entry]] = {}
    ancestors: dict[int, set[int]] = {}
    for oid, pubname, schema, name, row_filter, columns, parents, generated in rows:
        published = None
        if columns is not None:
            assert isinstance(columns, list)
            assert isinstance(generated, list)
            # Before PostgreSQL 18 no generated column is published, whatever attnames says.
            hidden = set() if version >= 180000 else {str(g) for g in generated}
            published = tuple(str(c) for c in columns if str(c) not in hidden)
        key = int(str(oid))
        entries.setdefault(key, []).append(
            _Entry(
                str(pubname),
                str(schema),
                str(name),
                None if row_filter is None else str(row_filter),
                published,
            )
        )
        assert isinstance(parents, list)
        ancestors[key] = {int(str(parent)) for parent in parents}
    tables = []
    for key, rows_of_table in entries.items():
        if ancestors[key] & entries.keys():
            continue  # streamed as its published ancestor (publish_via_partition_root)
        tables.append(_combine(rows_of_table, check_column_lists=check_column_lists))
    return tables


def _combine(entries: Sequence[_Entry], *, check_column_lists: bool) -> PublishedTable:
    """One table as several publications publish it together (pgoutput's rules)."""
    first = entries[0]
    column_lists = {entry.columns for entry in entries}
    if len(column_lists) > 1 and check_column_lists:
        shown = "; ".join(
            f"{entry.publication}: "
            + ("all columns" if entry.columns is None else ", ".join(entry.columns))
            for entry in entries
        )
        raise PublicationError(
            f"Table {first.schema}.{first.name} is published with different column lists "
            f"({shown}); PostgreSQL refuses to stream such a table to one subscriber "
            "(cannot use different column lists for table in different publications). "
            "Give it the same column list in every publication, or subscribe to fewer."
        )
    filters: list[str] = []
    for entry in entries:
        if entry.row_filter is None:
            filters = []
            break
        if entry.row_filter not in filters:
            filters.append(entry.row_filter)
    where = " OR ".join(f"({f})" for f in filters) if filters else None
    return PublishedTable(first.schema, first.name, where, first.columns)


__all__ = [
    "FAILOVER_SINCE",
    "PublishedTable",
    "SlotInUseError",
    "SlotState",
    "StandbySlot",
    "StandbyState",
    "check_server",
    "current_wal_lsn",
    "drop_slot",
    "ensure_publication",
    "ensure_slot",
    "parse_slot_list",
    "publication_tables",
    "read_published_tables",
    "require_publications",
    "server_version",
    "slot_state",
    "standby_slots",
    "wal_end_position",
    "wal_sender_timeout_seconds",
    "want_failover",
]
