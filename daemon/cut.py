"""``wal2delta cut``: Delta versions of every table at one source transaction boundary.

Delta has no multi-table transactions, so a reader of two tables may see one after batch
N and the other after batch N-1. The sink records every batch in the commit log
(``<sink.path>/_wal2delta_commits``, ``sink/records/commits.py``): its number, its durable LSN
(NULL for a batch holding part of a large transaction), its newest commit time and the
Delta version of each table it wrote, plus an intent row per batch written before its
first write, with ``high_lsn``, its newest change. A *boundary* is a recorded batch with
an LSN - the source state after a whole transaction - past the ``high_lsn`` of every
earlier batch: after a crash the replayed batches re-apply transactions some tables
already hold changes beyond, and are no boundary until the replay passes the crashed
batch. The cut at a point is the newest boundary at or
before it (an LSN, or a commit time); for every table, the newest version recorded at or
before that boundary is the version that reflects exactly the source state there (tables
not written since keep their earlier version; versions after it belong to later batches).

With ``sink.retention`` the daemon vacuums each table's old files but keeps every version a
cut may still name (``sink.retained_versions``): those of the boundaries recorded within
the retention and of the newest boundary recorded before it. A cut at an older boundary
is refused (``CutError``), never answered with versions whose files may be gone. The
daemon also trims each table's Delta log to the versions of ``sink.log_retention``
(``sink/upkeep/logtrim.py``): a cut naming a version its table's log no longer holds is
refused too (``readable_cut``), naming the table. Tables
written with deletion vectors (``sink.deletion_vectors``) are read through delta-rs's
``DeltaTable.scan`` or ``QueryBuilder``; ``to_pyarrow_table`` refuses them.

Read-only: the commit log is read with delta-rs, with the credentials of the environment
(as ``status`` reads the lake).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from config import AppConfig
from decoder import Lsn, format_lsn, parse_lsn
from sink import (
    commits_path,
    consistent_boundaries,
    oldest_readable_version,
    oldest_retained_boundary,
    read_commit_records,
)

Point = Lsn | datetime
"""Where to cut: a source LSN or a commit time (aware)."""


@dataclass(frozen=True)
class CutTable:
    """One table at the cut: its name (``schema.table``, ``...__changes`` for a change
    history), location and Delta version."""

    table: str
    path: str
    version: int


@dataclass(frozen=True)
class Cut:
    """The boundary a cut was taken at and every table's version there."""

    lsn: str
    commit_time: str | None
    batch: int
    tables: list[CutTable]


class CutError(Exception):
    """No cut can be taken (no commit log, or no boundary at or before the point)."""


def parse_point(text: str) -> Point:
    """An LSN (``16/B374D848``) or an ISO 8601 time (UTC when it names no offset).

    Raises:
        ValueError: neither.
    """
    if "/" in text:
        return parse_lsn(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is neither an LSN (X/X) nor an ISO 8601 time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def choose_cut(
    records: Iterable[Mapping[str, object]],
    at: Point | None = None,
    *,
    vacuumed_before: datetime | None = None,
) -> Cut:
    """The cut at ``at`` (the newest boundary when None) from the commit log's rows.

    ``vacuumed_before``: with ``sink.retention``, the moment before which vacuum may have
    removed versions (now minus the retention); a boundary older than the oldest one
    vacuum keeps (``sink.oldest_retained_boundary``) is refused.

    Raises:
        CutError: no boundary at or before ``at``, or only one vacuum may have removed.
    """
    rows = sorted(records, key=lambda r: _int(r["batch"]))
    boundaries = [r for r in consistent_boundaries(rows) if _at_or_before(r, at)]
    if not boundaries:
        where = "" if at is None else f" at or before {_describe(at)}"
        raise CutError(f"the commit log holds no transaction boundary{where}")
    chosen = max(boundaries, key=lambda r: _int(r["batch"]))
    number = _int(chosen["batch"])
    if vacuumed_before is not None:
        oldest = oldest_retained_boundary(rows, vacuumed_before)
        if oldest is not None and number < oldest:
            raise CutError(
                f"the boundary at or before {_describe(at) if at else 'that point'} "
                f"(batch {number}) is older than sink.retention: vacuum may have removed "
                f"the versions it names; the oldest cut still kept is at batch {oldest}"
            )
    newest: dict[str, CutTable] = {}
    for row in rows:
        if _int(row["batch"]) > number or row["table_name"] is None:
            continue
        name, version = str(row["table_name"]), _int(row["version"])
        known = newest.get(name)
        if known is None or version > known.version:
            newest[name] = CutTable(name, str(row["table_path"]), version)
    commit_time = chosen["commit_time"]
    return Cut(
        lsn=format_lsn(_int(chosen["lsn"])),
        commit_time=commit_time.isoformat() if isinstance(commit_time, datetime) else None,
        batch=number,
        tables=[newest[name] for name in sorted(newest)],
    )


def take_cut(config: AppConfig, at: Point | None = None) -> Cut:
    """Read the lake's commit log and choose the cut at ``at``.

    With ``sink.retention``, a boundary vacuum may have removed is refused.

    Raises:
        CutError: the lake has no commit log yet, or no boundary at or before ``at``.
    """
    root = str(config.sink.path)
    try:
        records = read_commit_records(root)
    except FileNotFoundError:
        raise CutError(
            f"no commit log at {commits_path(root)}: the daemon has not applied a batch yet"
        ) from None
    retention = config.sink.retention
    vacuumed_before = None if retention is None else datetime.now(UTC) - retention
    return readable_cut(choose_cut(records, at, vacuumed_before=vacuumed_before))


def readable_cut(cut: Cut) -> Cut:
    """``cut``, once every version it names is checked to be still in its table's log.

    Raises:
        CutError: a table's log no longer holds its version (trimmed: the boundary is
            older than ``sink.log_retention``), or cannot be read.
    """
    for table in cut.tables:
        try:
            oldest = oldest_readable_version(table.path)
        except Exception as exc:
            raise CutError(
                f"cannot read the Delta log of {table.table} at {table.path}: {exc}"
            ) from exc
        if oldest is None:
            raise CutError(f"{table.table} has no Delta log at {table.path}")
        if table.version < oldest:
            raise CutError(
                f"the cut at batch {cut.batch} names version {table.version} of {table.table}, "
                f"which its Delta log no longer holds (it starts at version {oldest}): the "
                "boundary is older than sink.log_retention; take a newer cut, or raise "
                "sink.log_retention to reach further back"
            )
    return cut


def spark_sql(table: CutTable) -> str:
    """A Spark SQL query reading ``table`` at its cut version."""
    return f"SELECT * FROM delta.`{table.path}` VERSION AS OF {table.version}"


def delta_rs_snippet(cut: Cut) -> str:
    """Python (delta-rs) reading every table of ``cut`` at its version."""
    lines = ["from deltalake import DeltaTable", "", "tables = {"]
    lines += [f"    {t.table!r}: DeltaTable({t.path!r}, version={t.version})," for t in cut.tables]
    lines.append("}")
    lines.append("# rows: tables[name].scan().read_all() (also with deletion vectors)")
    return "\n".join(lines)


def render_cut(cut: Cut, *, as_json: bool = False) -> str:
    """The cut as text (versions, Spark SQL, delta-rs) or as one JSON object."""
    if as_json:
        data = asdict(cut)
        for entry, table in zip(data["tables"], cut.tables, strict=True):
            entry["spark_sql"] = spark_sql(table)
        data["delta_rs"] = delta_rs_snippet(cut)
        return json.dumps(data, indent=2)
    width = max((len(t.table) for t in cut.tables), default=0)
    lines = [
        f"cut at LSN {cut.lsn} (commit time {cut.commit_time or 'unknown'}, batch {cut.batch})"
    ]
    lines += [f"  {t.table:<{width}}  version {t.version:>6}  {t.path}" for t in cut.tables]
    lines += ["", "Spark SQL:"]
    lines += [f"  {spark_sql(t)};" for t in cut.tables]
    lines += ["", "delta-rs (Python):"]
    lines += [f"  {line}" if line else "" for line in delta_rs_snippet(cut).splitlines()]
    return "\n".join(lines)


def _at_or_before(row: Mapping[str, object], at: Point | None) -> bool:
    if at is None:
        return True
    if isinstance(at, datetime):
        moment = row["commit_time"]
        return isinstance(moment, datetime) and moment <= at
    return _int(row["lsn"]) <= at


def _describe(at: Point) -> str:
    return at.isoformat() if isinstance(at, datetime) else f"LSN {format_lsn(at)}"


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value
