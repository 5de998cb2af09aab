"""The bare engine's floor for the one-table lag (issue 40): what ``bench lag``'s stream
would lag if the daemon added nothing to the engine's work.

``python -m bench lag`` runs this after the daemon's run, in the same process, on the same
Spark session and the same Delta table (its layout, its files, its log as the daemon's
trim leaves it). No PostgreSQL (the benchmark stops its server first), no decoding, no
daemon: transactions of the workload's shape (``bench.workload``: transaction ``k``
inserts keys ``k * inserts + 1 ..``, updates the first ``updates`` keys of transaction
``k - 1`` and deletes the ``deletes`` after them) fall due on the writer's schedule
(``rate`` changes a second), continuing the daemon's key sequence. One loop applies them,
as one sink worker would:

* a batch takes every transaction due and not yet applied, folded to one row per key (the
  last change of each), and writes it with **one MERGE** - the daemon's statement for this
  table, bare: the written key-range partitions as literals, the key, the replay guard,
  delete, update every column, insert - from a Parquet source file the engine reads;
* then **one two-row append** to a small table, as the daemon's commit log takes one
  append per batch (the previous batch's record riding with this batch's intent);
* every ``COMPACT_EVERY`` batches, a delta-rs compaction of the written partitions and of
  the small table, as the daemon's upkeep does between batches (without it the MERGE
  slows with every file it adds).

A transaction's lag is the end of its batch's append minus the moment it fell due (a
compaction after it delays the next batch, as the daemon's upkeep does). The daemon's
figure adds the capture side (the server's commit, the WAL sender, decoding, batching),
the commit log's reads, planning and the rest of its upkeep. The floor trims the table's
log once before it starts and then lets it grow (``seconds`` of commits, no more than
the daemon's own trim keeps). Why the floor is part of the benchmark:
docs/decisions/0135-throughput-targets-are-judged-against-the-engines-floor.md.
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq

from bench.table_floor import share_table
from sink import MetadataColumns
from sink.upkeep.logtrim import trim_log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COMPACT_EVERY: Final = 20
"""Batches between two compactions, as ``sink.compact_after_writes`` defaults."""
_DELETED: Final = "floor_deleted"


@dataclass(frozen=True, slots=True)
class FloorRun:
    """What the floor measured."""

    transaction_lags: list[float]
    batch_seconds: list[float]
    """Wall time of each batch: MERGE, append and, every ``COMPACT_EVERY``, compaction."""
    merge_seconds: list[float]
    append_seconds: list[float]
    compaction_seconds: list[float]

    def summary(self) -> str:
        """Medians of the parts of a batch, for the report's facts."""
        return (
            f"{len(self.batch_seconds)} batches; median MERGE "
            f"{1000 * statistics.median(self.merge_seconds):.0f} ms, append "
            f"{1000 * statistics.median(self.append_seconds):.0f} ms; "
            f"{len(self.compaction_seconds)} compactions, median "
            f"{1000 * statistics.median(self.compaction_seconds or [0.0]):.0f} ms"
        )


class LagFloor:
    """Applies the workload's transactions to a Delta table with bare engine calls."""

    def __init__(
        self,
        spark: SparkSession,
        path: str,
        *,
        meta: MetadataColumns,
        sizes: tuple[int, int, int],
        first_transaction: int,
        bucket_width: int | None,
        workdir: Path,
    ) -> None:
        """``sizes``: inserts, updates and deletes a transaction; ``first_transaction``:
        the workload's number of the first transaction (the daemon's writer wrote those
        before); ``bucket_width``: the table's key-range partition width (None: none)."""
        self._spark = spark
        self._path = path
        self._meta = meta
        self._inserts, self._updates, self._deletes = sizes
        self._next = first_transaction
        self._width = bucket_width
        self._files = workdir / "floor-sources"
        self._files.mkdir(parents=True, exist_ok=True)
        self._records = str(workdir / "floor-records")
        self._numbers = itertools.count(1)
        self._lsn_base = 0
        partitions = deltalake.DeltaTable(path).metadata().partition_columns
        self._bucket = partitions[0] if partitions else None

    def run(self, *, rate: float, seconds: float) -> FloorRun:
        """Let transactions fall due at ``rate`` changes a second for ``seconds`` and apply
        them as they come; return the lags once the last is applied.

        Raises:
            RuntimeError: the table's row count did not change as the transactions' did (a
                floor that matched no key would be cheaper than the work it stands for).
        """
        rows_before = self._count()
        self._lsn_base = self._newest_lsn() + 1  # the floor's changes pass the replay guard
        # Start from a log as short as the daemon's trim ever leaves it.
        trim_log(self._path, cutoff=datetime.now(UTC))
        interval = (self._inserts + self._updates + self._deletes) / rate
        count = int(seconds / interval)
        lags: list[float] = []
        run = FloorRun(lags, [], [], [], [])
        started = time.perf_counter()
        applied = 0
        while applied < count:
            now = time.perf_counter()
            due = min(count, int((now - started) / interval) + 1)
            if due <= applied:
                time.sleep(started + applied * interval - now)
                continue
            durable = self._apply(range(self._next + applied, self._next + due), run)
            lags += [durable - (started + i * interval) for i in range(applied, due)]
            applied = due
        self._next += count
        expected = rows_before + count * (self._inserts - self._deletes)
        if (rows_after := self._count()) != expected:
            raise RuntimeError(f"the floor left {rows_after} rows, not {expected}")
        return run

    def _newest_lsn(self) -> int:
        query = f"SELECT max(`{self._meta.lsn}`) AS n FROM delta.`{self._path}`"
        return int(self._spark.sql(query).collect()[0]["n"])

    def _count(self) -> int:
        row = self._spark.sql(f"SELECT count(*) AS n FROM delta.`{self._path}`").collect()[0]
        return int(row["n"])

    def _apply(self, transactions: range, run: FloorRun) -> float:
        """Apply one batch; return when it was durable (its append done), before the
        compaction that may follow, as the daemon reports a batch before its upkeep."""
        batch_started = time.perf_counter()
        rows = self._rows(transactions)
        file = self._files / f"{next(self._numbers)}.parquet"
        pq.write_table(rows, str(file), compression="none", use_dictionary=False)
        try:
            self._spark.sql(self._merge(f"parquet.`{file}`", rows))
        finally:
            file.unlink(missing_ok=True)
        merged = time.perf_counter()
        record = pa.table(
            {"batch": pa.array([transactions[-1]] * 2, pa.int64()), "lsn": [0, transactions[-1]]}
        )
        self._spark.createDataFrame(record).write.format("delta").mode("append").save(self._records)
        appended = time.perf_counter()
        run.merge_seconds.append(merged - batch_started)
        run.append_seconds.append(appended - merged)
        if len(run.merge_seconds) % COMPACT_EVERY == 0:
            self._compact(rows)
            run.compaction_seconds.append(time.perf_counter() - appended)
        run.batch_seconds.append(time.perf_counter() - batch_started)
        return appended

    def _rows(self, transactions: range) -> pa.Table:
        """The batch's rows, one per key: the last change of each, in the table's columns
        with the delete flag (and the key-range partition)."""
        changes: dict[int, tuple[int, bool]] = {}
        for k in transactions:
            lsn = self._lsn_base + k
            previous = (k - 1) * self._inserts
            for key in range(k * self._inserts + 1, (k + 1) * self._inserts + 1):
                changes[key] = (lsn, False)
            for key in range(previous + 1, previous + self._updates + 1):
                changes[key] = (lsn, False)
            first_deleted = previous + self._updates + 1
            for key in range(first_deleted, first_deleted + self._deletes):
                changes[key] = (lsn, True)
        parts = []
        for lsn in sorted({lsn for lsn, _ in changes.values()}):
            keys = [key for key, (at, _) in changes.items() if at == lsn]
            part = share_table(self._meta, keys, lsn=lsn, mark=lsn % 7)
            parts.append(part.append_column(_DELETED, pa.array([changes[k][1] for k in keys])))
        rows = pa.concat_tables(parts)
        if self._bucket is not None and self._width is not None:
            ids = rows.column("id").to_pylist()
            rows = rows.append_column(
                self._bucket, pa.array([key // self._width for key in ids], pa.int64())
            )
        return rows

    def _buckets(self, rows: pa.Table) -> list[int]:
        if self._bucket is None:
            return []
        return sorted(set(rows.column(self._bucket).to_pylist()))

    def _merge(self, source: str, rows: pa.Table) -> str:
        """The daemon's MERGE for this table (``sink.engine.sql.render_merge``), bare."""
        columns = [name for name in rows.column_names if name != _DELETED]
        data = [name for name in columns if name != self._bucket]
        guard = f"t.`{self._meta.lsn}` <= s.`{self._meta.lsn}`"
        match = "t.`id` = s.`id`"
        if self._bucket is not None:
            bucket = f"`{self._bucket}`"
            listed = ", ".join(str(b) for b in self._buckets(rows))
            match = f"t.{bucket} IN ({listed}) AND t.{bucket} = s.{bucket} AND {match}"
        updates = ", ".join(f"t.`{name}` = s.`{name}`" for name in data)
        names = ", ".join(f"`{name}`" for name in columns)
        values = ", ".join(f"s.`{name}`" for name in columns)
        return (
            f"MERGE INTO delta.`{self._path}` AS t USING {source} AS s ON {match} "
            f"WHEN MATCHED AND s.`{_DELETED}` AND {guard} THEN DELETE "
            f"WHEN MATCHED AND NOT s.`{_DELETED}` AND {guard} THEN UPDATE SET {updates} "
            f"WHEN NOT MATCHED AND NOT s.`{_DELETED}` THEN INSERT ({names}) VALUES ({values})"
        )

    def _compact(self, rows: pa.Table) -> None:
        buckets = self._buckets(rows)
        filters = (
            [(self._bucket, "in", [str(b) for b in buckets])]
            if self._bucket is not None and buckets
            else None
        )
        deltalake.DeltaTable(self._path).optimize.compact(partition_filters=filters)
        deltalake.DeltaTable(self._records).optimize.compact()
