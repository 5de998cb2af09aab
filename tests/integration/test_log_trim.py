"""Log trimming (``sink.log_retention``, ``sink/upkeep/logtrim.py``): Sail-written tables whose
``_delta_log`` is trimmed to the versions kept readable, read back with delta-rs and the
engine (docs/decisions/0134-the-delta-log-is-trimmed-to-the-versions-kept.md).

A table written in many batches (Sail checkpoints every ten versions) has its older commit
files aged by hand: a trim deletes exactly the files of the versions before the newest
checkpoint at or before the version current at the cutoff, every version from there reads
as it did, older ones no longer load, and the sink goes on writing. A table without such
a checkpoint, or whose old versions are among its newest ``keep_versions``, keeps its
whole log. The sink's schedule trims each table it writes once at first and then every
interval; ``wal2delta cut`` refuses a cut naming a trimmed version.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError

from daemon.cut import CutError, choose_cut, readable_cut
from decoder import Lsn
from sink import DeltaSink, commits_path, read_commit_records, table_path
from sink.lake.deltalog import oldest_readable_version, read_table_files
from sink.lake.tables import LakeTables
from sink.upkeep.compaction import Compactor
from sink.upkeep.logtrim import (
    LogTrim,
    log_horizon,
    tombstone_horizon,
    tombstone_property,
    trim_log,
)
from tests.support.settings import sink_settings
from tests.support.sink_changes import INT4, col, ended, insert, rel, update

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

DOCS = rel("public.docs", col("id", INT4, key=True), col("body"))
BATCHES = 26
"""Batches written: versions 0-25 of the table, Sail checkpoints at 10 and 20."""


def _rows(path: str, version: int | None = None) -> dict[int, str]:
    table = DeltaTable(path, version=version)
    data = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())
    return {r["id"]: r["body"] for r in data.select(["id", "body"]).to_pylist()}


def _write(sink: DeltaSink, batches: int, first: int = 0) -> None:
    for n in range(first, first + batches):
        lsn = 10 * (n + 1)
        if n == 0:
            seed = (insert(DOCS, str(k), f"b{k}", lsn=lsn, ordinal=k) for k in range(5))
            sink.apply(ended(*seed))
        else:
            sink.apply(ended(update(DOCS, str(n % 5), f"v{n}", lsn=lsn, ordinal=0)))


def _age(path: str, versions: range, seconds: float) -> None:
    """Make the commit files of ``versions`` ``seconds`` old."""
    then = time.time() - seconds
    for version in versions:
        os.utime(Path(path) / "_delta_log" / f"{version:020d}.json", (then, then))


def _log(path: str) -> set[str]:
    return set(os.listdir(Path(path) / "_delta_log"))


def _versioned(names: set[str], below: int) -> set[str]:
    return {n for n in names if n[:20].isdigit() and int(n[:20]) < below}


@pytest.fixture
def written(spark_session: Any, tmp_path: Path) -> tuple[DeltaSink, str, dict[int, dict[int, str]]]:
    """A sink, the table it wrote in ``BATCHES`` batches, and its rows at every version."""
    # The sink's own trims off: these tests run them by hand.
    settings = sink_settings(tmp_path / "lake", compact_after_writes=0, log_retention=None)
    sink = DeltaSink(spark_session, settings)
    _write(sink, BATCHES)
    path = table_path(str(tmp_path / "lake"), "public", "docs")
    assert DeltaTable(path).version() == BATCHES - 1
    checkpoints = {n for n in _log(path) if n.endswith(".checkpoint.parquet")}
    assert {int(n[:20]) for n in checkpoints} >= {10, 20}, "Sail checkpoints every ten versions"
    return sink, path, {v: _rows(path, v) for v in range(BATCHES)}


def test_a_trim_deletes_the_versions_before_the_checkpoint_the_cutoff_needs(
    written: tuple[DeltaSink, str, dict[int, dict[int, str]]],
) -> None:
    sink, path, before = written
    cutoff = datetime.now(UTC) - timedelta(minutes=30)
    _age(path, range(0, 24), seconds=3600)  # versions 0-23 older than the cutoff
    listed = _log(path)

    deleted = trim_log(path, cutoff=cutoff, keep_versions=0)

    # Version 23 was current at the cutoff; the newest checkpoint at or before it is 20.
    assert set(deleted) == _versioned(listed, 20)
    assert {n[:20] for n in deleted} == {f"{v:020d}" for v in range(20)}
    assert _log(path) == listed - set(deleted)
    assert "_last_checkpoint" in _log(path)
    assert oldest_readable_version(path) == 20
    for version in range(20, BATCHES):
        assert _rows(path, version) == before[version], version
    with pytest.raises(DeltaError, match=r"No files in log segment"):
        DeltaTable(path, version=19)
    assert read_table_files(path).version == BATCHES - 1
    # The engine goes on writing and reading the trimmed table.
    sink.apply(ended(update(DOCS, "1", "after", lsn=10_000, ordinal=0)))
    assert _rows(path)[1] == "after"
    assert trim_log(path, cutoff=cutoff, keep_versions=0) == ()  # nothing more is old


def test_a_trim_keeps_the_newest_versions_and_needs_a_checkpoint(
    written: tuple[DeltaSink, str, dict[int, dict[int, str]]],
) -> None:
    _, path, before = written
    cutoff = datetime.now(UTC) - timedelta(minutes=30)
    _age(path, range(BATCHES), seconds=3600)  # every version older than the cutoff
    listed = _log(path)

    # The newest 12 versions (13-25) are kept: the checkpoint at or before 13 is 10.
    deleted = trim_log(path, cutoff=cutoff, keep_versions=12)
    assert set(deleted) == _versioned(listed, 10)
    assert oldest_readable_version(path) == 10
    assert all(_rows(path, v) == before[v] for v in range(10, BATCHES))

    # With the newest 20 kept (5-25), no checkpoint at or before 5 remains: nothing goes.
    assert trim_log(path, cutoff=cutoff, keep_versions=20) == ()
    # Commits newer than the cutoff keep everything from the checkpoint before them.
    _age(path, range(10, BATCHES), seconds=0)
    assert trim_log(path, cutoff=cutoff, keep_versions=0) == ()
    assert oldest_readable_version(path) == 10


def test_the_sink_trims_each_table_it_writes_first_and_then_every_interval(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    settings = sink_settings(lake, compact_after_writes=0, log_retention="10m")
    assert settings.log_retention == 600
    assert log_horizon(settings.log_retention, settings.retention) == 600
    assert log_horizon(600, 3600) == 3600  # vacuum's versions stay readable
    assert log_horizon(None, None) is None
    assert sink_settings(lake).log_retention == 60  # the configuration's default
    assert sink_settings(lake, log_retention=None).log_retention is None

    # The sink's compactor trims with the configured horizon, and keeps tombstones as long.
    sink = DeltaSink(spark_session, settings)
    trims = Compactor.for_settings(settings, LakeTables(spark_session, settings.metadata))
    assert trims.log_trim is not None
    assert trims.log_trim.horizon == 600
    assert trims.log_trim.tombstones == {
        "delta.deletedFileRetentionDuration": "interval 660 seconds"
    }
    assert (
        Compactor.for_settings(
            replace(settings, log_retention=None), LakeTables(spark_session, settings.metadata)
        ).log_trim
        is None
    )
    # A young table's log is left alone: the sink's own turns write nothing.
    _write(sink, BATCHES)
    sink.after_apply()
    path = table_path(str(lake), "public", "docs")
    records = commits_path(str(lake))
    assert DeltaTable(path).version() == BATCHES - 1
    assert oldest_readable_version(path) == 0
    now = [time.time() + 7200.0]  # two hours on: every commit is older than the horizon
    trim = LogTrim(600, every=60, keep_versions=3, clock=lambda: now[0])
    compactor = Compactor(0, log_trim=trim)

    compactor.wrote([path, records])
    assert compactor.compact_due() is False
    # Keeping the newest three versions (23-25): the newest checkpoint at or before 23 is 20.
    assert oldest_readable_version(path) == 20
    assert _versioned(_log(path), 20) == set()
    commit_log_start = oldest_readable_version(records)
    assert commit_log_start is not None
    assert commit_log_start >= 10
    assert read_commit_records(str(lake))  # the commit log still reads

    # Not due again within the interval, though the table grew.
    _write(sink, 12, first=BATCHES)
    compactor.wrote([path])
    assert compactor.compact_due() is False
    assert oldest_readable_version(path) == 20
    now[0] += 61
    assert compactor.compact_due() is False
    assert oldest_readable_version(path) == 30  # 37 - 3 = 34: the checkpoint at 30
    assert _rows(path)[1] == "v36"

    # A budget spent leaves the other tables for the next call (one trim a call at least).
    now[0] += 61
    assert compactor.compact_due(budget_seconds=0.0) is True
    assert compactor.compact_due(budget_seconds=0.0) is False


def test_a_cut_naming_a_trimmed_version_is_refused(spark_session: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    settings = sink_settings(lake, compact_after_writes=0, log_retention=None)
    sink = DeltaSink(spark_session, settings)
    _write(sink, BATCHES)
    sink.close()
    path = table_path(str(lake), "public", "docs")
    records = read_commit_records(str(lake))
    old = choose_cut(records, Lsn(55))  # batch 5: version 4 of the table
    newest = choose_cut(records)
    assert readable_cut(old) == old

    _age(path, range(BATCHES), seconds=3600)
    trim_log(path, cutoff=datetime.now(UTC) - timedelta(minutes=1), keep_versions=3)

    with pytest.raises(CutError, match=r"public\.docs.*no longer holds.*sink\.log_retention"):
        readable_cut(old)
    assert readable_cut(newest) == newest
    docs = next(t for t in newest.tables if t.table == "public.docs")
    assert _rows(path, docs.version)[1] == "v21"


def _tombstones(path: str, version: int) -> int:
    checkpoint = Path(path) / "_delta_log" / f"{version:020d}.checkpoint.parquet"
    removes = pq.read_table(checkpoint, columns=["remove"]).column("remove")
    return len(removes.drop_null())


def test_the_first_turn_sets_how_long_checkpoints_keep_tombstones(
    written: tuple[DeltaSink, str, dict[int, dict[int, str]]],
) -> None:
    sink, path, before = written
    assert tombstone_horizon(None, None) is None
    assert tombstone_horizon(60, None) == 120  # the log's horizon and grace
    assert tombstone_horizon(60, 7200) == 7200 + 3600 + 3600  # until the vacuum has run
    assert tombstone_property(120.4) == {
        "delta.deletedFileRetentionDuration": "interval 121 seconds"
    }
    # Sail's checkpoint at 20 holds a tombstone for every file its MERGEs replaced.
    assert _tombstones(path, 20) >= 15
    assert "delta.deletedFileRetentionDuration" not in DeltaTable(path).metadata().configuration

    # A turn that deletes nothing leaves the table as it is.
    trim = LogTrim(600, tombstones=1.0, keep_versions=1000)
    trim.wrote([path])
    trim.trim_due()
    assert DeltaTable(path).version() == BATCHES - 1
    # Once the log outlived the horizon (a turn deleted files), the tombstones are bounded.
    now = [time.time() + 7200.0]
    trim = LogTrim(600, tombstones=1.0, keep_versions=3, clock=lambda: now[0])
    trim.wrote([path])
    trim.trim_due()
    assert oldest_readable_version(path) == 20
    table = DeltaTable(path)
    assert table.metadata().configuration["delta.deletedFileRetentionDuration"] == (
        "interval 1 seconds"
    )
    assert table.version() == BATCHES  # one metadata commit
    _write(sink, 10, first=BATCHES)  # versions 27-36
    trim = LogTrim(600, tombstones=1.0, keep_versions=3, clock=lambda: now[0])
    trim.wrote([path])
    trim.trim_due()  # a new process trims again, finds the property set: no commit
    assert oldest_readable_version(path) == 30
    assert DeltaTable(path).version() == BATCHES + 10

    time.sleep(1.5)  # every tombstone so far is older than the table keeps them
    _write(sink, 4, first=BATCHES + 10)  # versions 37-40: Sail's checkpoint at 40
    assert _tombstones(path, 40) <= 4, "only the removes of the last second are kept"
    latest = {n % 5: f"v{n}" for n in range(BATCHES, BATCHES + 14)}
    assert _rows(path) == {**before[BATCHES - 1], **latest}
