"""Publication and replication slot administration, and the start-up catalog checks.

Everything here runs once at start-up on a regular (non-replication) connection; nothing
queries the catalog while decoding. SQL is composed with ``psycopg.sql`` so identifiers are
always quoted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from capture.errors import (
    ServerCapabilityError,
    SlotInUseError,
    SlotInvalidatedError,
    SlotNotFoundError,
)
from decoder import Lsn, parse_lsn


@dataclass(frozen=True, slots=True)
class PublishedTable:
    """One table of the publication as configured."""

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


Conn = psycopg.Connection[tuple[object, ...]]


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


def current_wal_lsn(conn: Conn) -> Lsn:
    """The server's WAL insert position: the end of every record written so far.

    The insert position, not ``pg_current_wal_lsn()`` (the write position): with
    ``synchronous_commit = off`` committed records may still sit in WAL buffers, and the
    write position would not cover them yet.
    """
    row = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return parse_lsn(str(row[0]))


def slot_state(conn: Conn, slot: str) -> SlotState | None:
    """Return the slot's state, or None when it does not exist."""
    row = conn.execute(
        """
        SELECT slot_name, plugin, database, active_pid, confirmed_flush_lsn::text,
               restart_lsn::text, wal_status, two_phase
        FROM pg_replication_slots WHERE slot_name = %s
        """,
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
    )


def ensure_slot(conn: Conn, slot: str, *, create: bool, two_phase: bool) -> SlotState:
    """Return the usable slot, creating it when allowed; never recreate a lost one.

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
            raise ServerCapabilityError("Publication column lists need PostgreSQL 15 or newer.")
        parts.append(
            sql.SQL("({})").format(sql.SQL(", ").join(sql.Identifier(c) for c in table.columns))
        )
    if table.where:
        if version < 150000:
            raise ServerCapabilityError("Publication row filters need PostgreSQL 15 or newer.")
        # The filter is operator-written SQL from the configuration, as in CREATE PUBLICATION.
        parts.append(sql.SQL("WHERE ({})").format(sql.SQL(table.where)))
    return sql.SQL(" ").join(parts)


def ensure_publication(
    conn: Conn,
    publication: str,
    tables: Sequence[PublishedTable],
    *,
    create: bool,
    via_partition_root: bool,
) -> None:
    """Create the publication, or make its table list match the configuration."""
    exists = conn.execute(
        "SELECT 1 FROM pg_publication WHERE pubname = %s", (publication,)
    ).fetchone()
    if not create:
        if exists is None:
            raise ServerCapabilityError(
                f"Publication {publication!r} does not exist; create it or set "
                "source.create_publication: true."
            )
        return
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
    """Drop ``slot`` if it exists (used by the demo and tests)."""
    conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    )


def publication_tables(conn: Conn, publication: str) -> list[str]:
    """Return ``schema.table`` for every table the publication publishes."""
    rows = conn.execute(
        "SELECT schemaname || '.' || tablename FROM pg_publication_tables "
        "WHERE pubname = %s ORDER BY 1",
        (publication,),
    ).fetchall()
    return [str(r[0]) for r in rows]


__all__ = [
    "PublishedTable",
    "SlotInUseError",
    "SlotState",
    "check_server",
    "current_wal_lsn",
    "drop_slot",
    "ensure_publication",
    "ensure_slot",
    "publication_tables",
    "server_version",
    "slot_state",
    "wal_sender_timeout_seconds",
]
