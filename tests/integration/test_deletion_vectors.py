"""Tables written with deletion vectors (``sink.deletion_vectors``), on Sail, read back with
delta-rs.

A table listed in the setting is created with the deletion-vectors feature and others are
not; batches of updates and deletes at random keys leave deletion vectors, and the table
reads back exactly (delta-rs ``QueryBuilder``, and Sail) after every batch; the commit
log records its versions and each reads as it was; compaction keeps its rows, and a purge
leaves the same rows and no deletion vector, and MERGEs go on after it. A table listed
only after it was created stays as it is, with a warning.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaProtocolError
from structlog.testing import capture_logs

from daemon.cut import choose_cut
from decoder import RowChange
from sink import DeltaSink, read_commit_records, table_path
from sink.lake.deltalog import read_table_files
from sink.upkeep.compaction import PURGE_AT
from tests.support.oracle import read_delta_table
from tests.support.settings import sink_settings
from tests.support.sink_changes import INT4, col, delete, ended, insert, rel, update

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ACCOUNTS = rel("public.accounts", col("id", INT4, key=True), col("owner"), col("note"))
TAGS = rel("public.tags", col("id", INT4, key=True), col("tag"), relation_id=16385)
ROWS = 400

Table = dict[int, tuple[str, str | None]]
"""A table as the tests expect it: id -> (owner, note)."""


def _features(path: str) -> list[str]:
    return list(DeltaTable(path).protocol().reader_features or [])


def _rows(path: str, version: int | None = None) -> Table:
    """id -> (owner, note), read through delta-rs's SQL engine (deletion vectors applied)."""
    table = DeltaTable(path, version=version)
    data = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all())
    return {
        r["id"]: (r["owner"], r["note"]) for r in data.select(["id", "owner", "note"]).to_pylist()
    }


def _sail_rows(spark: Any, path: str) -> Table:
    rows = spark.sql(f"SELECT id, owner, note FROM delta.`{path}`").collect()
    return {r["id"]: (r["owner"], r["note"]) for r in rows}


def _random_batches(
    sink: DeltaSink, path: str, *, batches: int, seed: int, lsn: int, spark: Any = None
) -> tuple[Table, list[Table]]:
    """Seed ``ROWS`` rows, then ``batches`` batches updating and deleting random keys and
    inserting new ones; the expected table after the seed and after every batch."""
    chooser = random.Random(seed)
    expected: Table = {n: (f"o{n}", None) for n in range(1, ROWS + 1)}
    seed_rows = [insert(ACCOUNTS, str(n), f"o{n}", None, lsn=lsn, ordinal=n) for n in expected]
    sink.apply(ended(*seed_rows))
    states = [dict(expected)]
    next_key = ROWS + 1
    for round_ in range(batches):
        lsn += 10
        changes: list[RowChange] = []
        for key in chooser.sample(sorted(expected), 40):
            if chooser.random() < 0.25:
                changes.append(
                    delete(ACCOUNTS, str(key), None, None, lsn=lsn, ordinal=len(changes))
                )
                del expected[key]
            else:
                note = f"r{round_}"
                owner = expected[key][0]
                changes.append(
                    update(ACCOUNTS, str(key), owner, note, lsn=lsn, ordinal=len(changes))
                )
                expected[key] = (owner, note)
        for _ in range(5):
            new = insert(
                ACCOUNTS, str(next_key), f"o{next_key}", "new", lsn=lsn, ordinal=len(changes)
            )
            changes.append(new)
            expected[next_key] = (f"o{next_key}", "new")
            next_key += 1
        sink.apply(ended(*changes))
        sink.after_apply()
        states.append(dict(expected))
        assert _rows(path) == expected, f"after batch {round_}"
        if spark is not None:
            assert _sail_rows(spark, path) == expected
    return expected, states


def test_only_the_tables_listed_get_deletion_vectors(spark_session: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    sink = DeltaSink(spark_session, sink_settings(lake, deletion_vectors=["public.accounts"]))
    sink.apply(ended(insert(ACCOUNTS, "1", "a", None, lsn=10), insert(TAGS, "1", "x", lsn=10)))
    accounts = table_path(str(lake), "public", "accounts")
    tags = table_path(str(lake), "public", "tags")
    assert "deletionVectors" in _features(accounts)
    assert "deletionVectors" not in _features(tags)
    assert DeltaTable(accounts).metadata().configuration["delta.enableDeletionVectors"] == "true"
    # The table kept without them reads with every delta-rs reader; the other one needs the
    # SQL engine.
    assert DeltaTable(tags).to_pyarrow_table().column("tag").to_pylist() == ["x"]
    with pytest.raises(DeltaProtocolError):
        DeltaTable(accounts).to_pyarrow_table()
    everything = tmp_path / "everything"
    DeltaSink(spark_session, sink_settings(everything, deletion_vectors=True)).apply(
        ended(insert(TAGS, "1", "x", lsn=10))
    )
    assert "deletionVectors" in _features(table_path(str(everything), "public", "tags"))
    default = tmp_path / "default"
    DeltaSink(spark_session, sink_settings(default)).apply(ended(insert(TAGS, "1", "x", lsn=10)))
    assert "deletionVectors" not in _features(table_path(str(default), "public", "tags"))


def test_a_table_listed_after_it_was_created_stays_without_them_and_a_warning_says_so(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    DeltaSink(spark_session, sink_settings(lake)).apply(
        ended(insert(ACCOUNTS, "1", "a", None, lsn=10))
    )
    sink = DeltaSink(spark_session, sink_settings(lake, deletion_vectors=["public.accounts"]))
    with capture_logs() as logs:
        sink.apply(ended(update(ACCOUNTS, "1", "b", None, lsn=20)))
        sink.apply(ended(update(ACCOUNTS, "1", "c", None, lsn=30)))
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert [e["table"] for e in warnings] == ["public.accounts"]  # once
    assert "deletionVectors" not in _features(table_path(str(lake), "public", "accounts"))


def test_random_key_updates_and_deletes_read_back_exactly_at_every_version(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    settings = sink_settings(lake, deletion_vectors=True, compact_after_writes=0)
    sink = DeltaSink(spark_session, settings)
    path = table_path(str(lake), "public", "accounts")
    expected, states = _random_batches(sink, path, batches=6, seed=1, lsn=100, spark=spark_session)
    files = read_table_files(path)
    # The MERGEs marked rows deleted instead of rewriting files.
    assert files.live_vectors
    assert 0 < (files.deleted_fraction() or 0) < 1
    assert read_delta_table(path).num_rows == len(expected)
    # Every version the commit log recorded reads as the table was after its batch.
    sink.settle()
    records = read_commit_records(str(lake))
    versions = sorted((r["batch"], r["version"]) for r in records if r["table_path"] == path)
    assert [_rows(path, int(str(version))) for _, version in versions] == states
    cut = choose_cut(records)
    (table,) = cut.tables
    assert (table.path, _rows(table.path, table.version)) == (path, expected)


def test_compaction_and_the_purge_keep_the_rows_and_the_purge_leaves_no_deletion_vector(
    spark_session: Any, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    settings = sink_settings(lake, deletion_vectors=True, compact_after_writes=4)
    sink = DeltaSink(spark_session, settings)
    path = table_path(str(lake), "public", "accounts")
    expected, _ = _random_batches(sink, path, batches=9, seed=2, lsn=100)
    operations = [c["operation"] for c in DeltaTable(path).history()]
    # Nine batches of 40 changes in 400 rows: past PURGE_AT twice; each purge is a rewrite
    # of the live rows (WRITE), a compaction before enough rows are dead (OPTIMIZE).
    assert PURGE_AT * ROWS < 9 * 40
    assert "WRITE" in operations[: operations.index("CREATE TABLE")], operations
    assert _rows(path) == expected
    # A purge now: the same rows, no deletion vector, the feature kept for the next MERGEs.
    doomed = sorted(expected)[:60]
    sink.apply(ended(*(delete(ACCOUNTS, str(k), None, None, lsn=900, ordinal=k) for k in doomed)))
    for key in doomed:
        del expected[key]
    assert (read_table_files(path).deleted_fraction() or 0) >= PURGE_AT
    before = DeltaTable(path).version()
    # The next process compacting after every write: due at its first write.
    sink = DeltaSink(
        spark_session, sink_settings(lake, deletion_vectors=True, compact_after_writes=1)
    )
    sink.apply(ended(update(ACCOUNTS, str(max(expected)), "z", "z", lsn=901)))
    expected[max(expected)] = ("z", "z")
    sink.after_apply()
    files = read_table_files(path)
    assert [c["operation"] for c in DeltaTable(path).history(limit=2)] == ["WRITE", "MERGE"]
    assert DeltaTable(path).version() == before + 2
    assert not files.live_vectors
    assert files.deleted_fraction() == 0
    assert _rows(path) == expected == _sail_rows(spark_session, path)
    assert "deletionVectors" in _features(path)
    # MERGEs go on, and mark rows deleted again.
    key = min(expected)
    sink.apply(ended(update(ACCOUNTS, str(key), "after", "purge", lsn=950)))
    expected[key] = ("after", "purge")
    assert _rows(path) == expected
    assert read_table_files(path).live_vectors
