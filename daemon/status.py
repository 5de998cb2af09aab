"""``wal2delta status``: the slot, its lag and retained WAL, and the Delta tables.

Read-only: one normal connection to the source and reads of the Delta logs. The version of
a Delta table in a local lake is the newest commit file its ``_delta_log`` directory
lists (``NNNNNNNNNNNNNNNNNNNN.json``, or a checkpoint), read without delta-rs; in an
object store delta-rs reads it. ``status`` is a command an operator runs during an
incident: it imports neither the engine nor delta-rs and Arrow for a local lake without
online copies (docs/decisions/0119-*).

On PostgreSQL 17 and newer it shows whether the slot is a failover slot and the state of
each standby slot named in the source's ``synchronized_standby_slots``
(``capture.slots.StandbySlot``): what the primary can tell about the standbys that would
keep the slot at a failover. Whether a standby holds a copy the standby itself shows
(``synced`` and not ``temporary`` in its ``pg_replication_slots``); docs/operations.md,
"Failover".

Each published table is shown with its Delta location (``sink.table_path``, the one
mapping every reader and writer uses) and, under ``sink.column_names: map``, the Delta
name of each column whose name Delta cannot hold (``sink.column_map``); under ``error``
such columns are listed as the ones that will stop the daemon. When the lake is a local
directory, Delta tables in it that no published table maps to (a table removed from the
publication, say) are listed too, named through the inverse mapping
(``sink.table_of_path``); object stores are not listed.

Several daemons may share a source, each with its own slot and a publication of disjoint
tables (docs/operations.md, "Several daemons per source"). ``status`` warns about each
published table that another pgoutput slot of the database streams or may stream
(``capture.find_overlaps``, ``overlaps`` in ``--json``): *confirmed* when a wal2delta
walsender streams that slot right now with a publication of the table (its
``START_REPLICATION`` in ``pg_stat_activity``, readable by the same role, a superuser or
``pg_read_all_stats``); *possible* when the slot is idle and another publication publishes
the table - the server does not record which publications an idle slot is streamed with,
so an idle slot streamed with our own publication goes unnoticed. A warning: the exit code
stays 0.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import psycopg
from psycopg import sql

from capture import find_overlaps, read_published_tables, sample_slot
from config import AppConfig
from daemon.wiring import source_conninfo
from decoder import format_lsn
from sink import (
    COPIES_TABLE,
    ColumnNamePolicy,
    column_map,
    delta_can_hold,
    local_directory,
    newest_logged_version,
    table_of_path,
    table_path,
)


@dataclass(frozen=True)
class TableStatus:
    """One published table and its Delta table.

    Attributes:
        table: ``schema.table``.
        schema: the schema name, exactly.
        name: the table name, exactly.
        delta_path: the Delta table's location (``sink.table_path``).
        delta_version: its latest Delta version; None while it does not exist.
        column_map: source column -> Delta column, for each column stored under another
            name (``sink.column_names: map``).
        refused_columns: columns whose name Delta cannot hold, which stop the daemon
            (``sink.column_names: error``).
    """

    table: str
    schema: str
    name: str
    delta_path: str
    delta_version: int | None
    column_map: dict[str, str] = field(default_factory=dict)
    refused_columns: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StandbySlotStatus:
    """A physical slot named in ``synchronized_standby_slots`` (``capture.StandbySlot``)."""

    name: str
    state: str
    restart_lsn: str | None


@dataclass(frozen=True)
class OverlapStatus:
    """A published table another pgoutput slot streams or may stream
    (``capture.Overlap``): two daemons streaming it both write its Delta table."""

    table: str
    publications: list[str]
    """The publications that publish it: ours first, then the other slots'."""
    slots: list[str]
    """Our slot first, then the other slots."""
    confirmed_slots: list[str]
    """The other slots a wal2delta walsender streams with one of those publications right
    now; the others are idle and may be streamed with them."""


@dataclass(frozen=True)
class Status:
    slot: str
    slot_exists: bool
    active_pid: int | None
    wal_status: str | None
    confirmed_flush_lsn: str | None
    server_lsn: str
    lag_bytes: int | None
    retained_wal_bytes: int | None
    publication: list[str]
    tables: list[TableStatus]
    column_names: ColumnNamePolicy = "error"
    other_delta_tables: list[TableStatus] | None = None
    """Delta tables in the lake no published table maps to; None: the lake (an object
    store) was not listed."""
    failover: bool | None = None
    """The slot is a failover slot; None before PostgreSQL 17 or without a slot."""
    synced: bool | None = None
    """The slot was copied from a former primary (this server was promoted)."""
    standby_slots: list[StandbySlotStatus] = field(default_factory=list)
    """The physical slots named in ``synchronized_standby_slots``, with their state."""
    copies: list[CopyStatus] = field(default_factory=list)
    """Tables copied while streaming (``<path>/_wal2delta_copies``): requested, running or
    done, with the position each copy met the stream at."""
    overlaps: list[OverlapStatus] = field(default_factory=list)
    """Published tables other pgoutput slots of the database stream or may stream."""


@dataclass(frozen=True)
class CopyStatus:
    """One table's online copy, as recorded in the lake (``sink/copies/copies.py``)."""

    table: str
    state: str
    consistent_point: str | None
    reason: str


def _copies(root: str) -> list[CopyStatus]:
    """The recorded online copies, not yet finished first."""
    log_table = f"{root.rstrip('/')}/{COPIES_TABLE}"
    if local_directory(root) is not None and _delta_version(log_table) is None:
        return []  # Without loading the copies' reader (delta-rs, Arrow and the sink's writer).
    from sink import read_copy_records  # noqa: PLC0415

    copies = [
        CopyStatus(
            copy.table,
            copy.state,
            None if copy.consistent_point is None else format_lsn(copy.consistent_point),
            copy.reason,
        )
        for copy in read_copy_records(root)
    ]
    return sorted(copies, key=lambda c: (c.state == "done", c.table))


def _delta_version(path: str) -> int | None:
    """The newest version of the Delta table at ``path``; None while it has none."""
    local = local_directory(path)
    if local is not None:
        return newest_logged_version(local)
    from deltalake import DeltaTable  # noqa: PLC0415 - only needed here

    if not DeltaTable.is_deltatable(path):
        return None
    return int(DeltaTable(path).version())


def collect_status(config: AppConfig) -> Status:
    """Gather the status of one configured source."""
    source = config.source
    root = str(config.sink.path)
    policy = config.sink.column_names
    table_status = []
    with psycopg.connect(source_conninfo(config), autocommit=True) as conn:
        sample = sample_slot(conn, source.slot)
        for published in read_published_tables(conn, source.publication, check_column_lists=False):
            schema, name = published.schema, published.name
            columns = published.columns or _table_columns(conn, schema, name)
            path = table_path(root, schema, name)
            table_status.append(
                TableStatus(
                    f"{schema}.{name}",
                    schema,
                    name,
                    path,
                    _delta_version(path),
                    dict(column_map(columns, policy)),
                    [c for c in columns if not delta_can_hold(c)] if policy == "error" else [],
                )
            )
        overlaps = [
            OverlapStatus(o.table, list(o.publications), list(o.slots), list(o.confirmed))
            for o in find_overlaps(
                conn, source.slot, source.publication, [t.table for t in table_status]
            )
        ]
    slot = sample.slot
    retained = None
    if slot is not None and slot.restart_lsn is not None:
        retained = max(0, sample.server_lsn - slot.restart_lsn)
    return Status(
        slot=source.slot,
        slot_exists=slot is not None,
        active_pid=slot.active_pid if slot else None,
        wal_status=slot.wal_status if slot else None,
        confirmed_flush_lsn=(
            format_lsn(slot.confirmed_flush_lsn)
            if slot and slot.confirmed_flush_lsn is not None
            else None
        ),
        server_lsn=format_lsn(sample.server_lsn),
        lag_bytes=sample.lag_bytes,
        retained_wal_bytes=retained,
        publication=list(source.publication),
        tables=table_status,
        column_names=policy,
        other_delta_tables=_other_delta_tables(root, {t.delta_path for t in table_status}),
        failover=slot.failover if slot else None,
        synced=slot.synced if slot else None,
        copies=_copies(root),
        overlaps=overlaps,
        standby_slots=[
            StandbySlotStatus(
                standby.name,
                standby.state,
                format_lsn(standby.restart_lsn) if standby.restart_lsn is not None else None,
            )
            for standby in sample.standby_slots
        ],
    )


def _table_columns(
    conn: psycopg.Connection[tuple[object, ...]], schema: str, table: str
) -> list[str]:
    """The live columns of a table, in column order."""
    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum",
        (sql.Identifier(schema, table).as_string(conn),),
    ).fetchall()
    return [str(name) for (name,) in rows]


def _other_delta_tables(root: str, published: set[str]) -> list[TableStatus] | None:
    """Delta tables at ``<root>/<schema part>/<table part>`` that are not in ``published``.

    Only a local lake is listed (``root`` without a URL scheme, or ``file://``).
    """
    base = local_directory(root)
    if base is None:
        return None
    found = []
    for schema_dir in sorted(base.iterdir()) if base.is_dir() else []:
        for table_dir in sorted(schema_dir.iterdir()) if schema_dir.is_dir() else []:
            path = f"{root.rstrip('/')}/{schema_dir.name}/{table_dir.name}"
            named = table_of_path(root, path)
            if named is None or path in published or not (table_dir / "_delta_log").is_dir():
                continue
            schema, name = named
            found.append(TableStatus(f"{schema}.{name}", schema, name, path, _delta_version(path)))
    return found


def render_status(status: Status, *, as_json: bool) -> str:
    """Human table by default, JSON for scripts."""
    if as_json:
        return json.dumps(asdict(status), indent=2)
    lines = [
        f"slot              {status.slot}" + ("" if status.slot_exists else "  (does not exist)"),
        f"active pid        {status.active_pid if status.active_pid is not None else '-'}",
        f"wal status        {status.wal_status or '-'}",
        f"confirmed flush   {status.confirmed_flush_lsn or '-'}",
        f"server WAL        {status.server_lsn}",
        f"lag               {_bytes(status.lag_bytes)}",
        f"WAL retained      {_bytes(status.retained_wal_bytes)}",
        *_failover_lines(status),
        f"publication       {', '.join(status.publication)}",
        f"column names      {status.column_names}",
        "",
        f"{'table':<32} {'delta version':>13}  path",
    ]
    for table in status.tables:
        lines.extend(_table_lines(table))
    if status.copies:
        lines += ["", f"{'table copied while streaming':<32} {'state':<10} {'at':<18} reason"]
        lines += [
            f"{copy.table:<32} {copy.state:<10} {copy.consistent_point or '-':<18} {copy.reason}"
            for copy in status.copies
        ]
    if status.other_delta_tables:
        lines += ["", "Delta tables in the lake that no published table maps to:"]
        for table in status.other_delta_tables:
            lines.extend(_table_lines(table))
    if status.overlaps:
        lines.append("")
        lines += [_overlap_line(o, status.publication) for o in status.overlaps]
    return "\n".join(lines)


def _overlap_line(overlap: OverlapStatus, own_publications: Sequence[str]) -> str:
    """The warning for a table another slot streams (confirmed) or may stream."""
    others = overlap.slots[1:]
    both = f"(slots {', '.join(overlap.slots)}; publications {', '.join(overlap.publications)})"
    if overlap.confirmed_slots:
        return (
            f"warning: table {overlap.table} is also streamed by another wal2delta, from slot "
            f"{', '.join(overlap.confirmed_slots)}: both daemons write it {both}; give each "
            "daemon a publication of disjoint tables"
        )
    foreign = ", ".join(p for p in overlap.publications if p not in own_publications)
    return (
        f"warning: table {overlap.table} is also published by {foreign}, and what pgoutput "
        f"slot{'s' if len(others) > 1 else ''} {', '.join(others)} of this database "
        f"stream{'' if len(others) > 1 else 's'} is not known (idle, or not readable by this "
        f"role): if another wal2delta streams {foreign}, both write {overlap.table} {both}"
    )


def _failover_lines(status: Status) -> list[str]:
    """Whether the slot survives a failover, as far as the primary can tell."""
    if status.failover is None:
        shown = "no (PostgreSQL 16 or older)" if status.slot_exists else "-"
        lines = [f"failover          {shown}"]
    elif not status.failover:
        lines = ["failover          no"]
    elif not status.standby_slots:
        lines = [
            "failover          yes; synchronized_standby_slots is empty: no standby is "
            "sure to have what Delta has"
        ]
    else:
        ready = sum(1 for standby in status.standby_slots if standby.state == "ready")
        lines = [
            f"failover          yes; {ready} of {len(status.standby_slots)} standby slots ready"
        ]
        lines += [
            f"  standby slot    {standby.name}  {standby.state}"
            f"  (received up to {standby.restart_lsn or '-'})"
            for standby in status.standby_slots
        ]
    if status.synced:
        lines.append("synced            yes: taken over from a former primary at its promotion")
    return lines


def _table_lines(table: TableStatus) -> Sequence[str]:
    version = "-" if table.delta_version is None else str(table.delta_version)
    lines = [f"{table.table:<32} {version:>13}  {table.delta_path}"]
    lines += [f"    column {s!r} is Delta column {d!r}" for s, d in table.column_map.items()]
    lines += [
        f"    column {name!r}: Delta cannot hold this name; the daemon stops at its first "
        "change (set sink.column_names: map)"
        for name in table.refused_columns
    ]
    return lines


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"
