"""``wal2delta status``: the slot, its lag and retained WAL, and the Delta tables.

Read-only: one normal connection to the source and delta-rs reads of the Delta logs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import psycopg

from capture.monitor import sample_slot
from capture.slots import publication_tables
from config import AppConfig
from decoder import format_lsn


@dataclass(frozen=True)
class TableStatus:
    table: str
    delta_path: str
    delta_version: int | None


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


def _delta_version(path: str) -> int | None:
    from deltalake import DeltaTable  # noqa: PLC0415 - only needed here

    if not DeltaTable.is_deltatable(path):
        return None
    return int(DeltaTable(path).version())


def collect_status(config: AppConfig) -> Status:
    """Gather the status of one configured source."""
    source = config.source
    with psycopg.connect(source.conninfo(), autocommit=True) as conn:
        sample = sample_slot(conn, source.slot)
        tables = publication_tables(conn, source.publication)
    slot = sample.slot
    retained = None
    if slot is not None and slot.restart_lsn is not None:
        retained = max(0, sample.server_lsn - slot.restart_lsn)
    root = str(config.sink.path)
    table_status = []
    for name in tables:
        schema, _, table = name.partition(".")
        path = str(Path(root) / schema / table)
        table_status.append(TableStatus(name, path, _delta_version(path)))
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
    )


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
        f"publication       {', '.join(status.publication)}",
        "",
        f"{'table':<32} {'delta version':>13}  path",
    ]
    for table in status.tables:
        version = "-" if table.delta_version is None else str(table.delta_version)
        lines.append(f"{table.table:<32} {version:>13}  {table.delta_path}")
    return "\n".join(lines)


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"
