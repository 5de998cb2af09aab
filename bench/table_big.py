"""An insert batch into a 10M-row table against the same batch into an empty one (issue 40).

Part of ``python -m bench tables`` (``--big``, on by default; ``--no-big`` skips it): in
the benchmark's own process and Spark session (embedded Sail as the daemon starts it, or
the ``--engine`` endpoint), through ``DeltaSink.apply`` - planning, the Arrow source, the
one engine write per table: the sink path of the daemon, without PostgreSQL.

1. The big table: created through a ``DeltaSink`` (one batch, so the schema, metadata
   columns and table features are the daemon's), then ``--big-rows`` rows appended with
   Spark in files of ``--big-rows-per-file`` consecutive keys (``bench.sink_scaling.
   build_table``: the rows ``bench.workload`` writes for the same keys, LSN 2).
2. For each of ``--big-repeat`` rounds: a fresh empty table, created the same way in a
   lake of its own; one batch of ``--big-batch`` inserts of new keys (one transaction, a
   newer LSN than the table holds, so no possible replay) applied to the empty table and
   the same batch to the big one, timed, the order alternating between rounds. Each apply
   is followed, untimed, by ``after_apply`` (the upkeep the sink worker runs once a batch
   is durable), so a compaction never lands in a timed apply.
3. The medians and their ratio (target: big / empty <= 2x), and the Delta operation of the
   big table's last commit (``WRITE``: appended; ``MERGE``: merged).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from deltalake import DeltaTable

from bench.settings import bench_sink_settings
from bench.sink_scaling import RELATION, build_table, make_batch
from sink import DeltaSink, table_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True, slots=True)
class BigRun:
    """Seconds of each timed apply, and how the sink wrote the batches."""

    rows: int
    batch: int
    empty_seconds: list[float]
    big_seconds: list[float]
    build_seconds: float
    operations: list[str]
    """The Delta operation of each batch's commit in the big table."""

    @property
    def ratio(self) -> float:
        """Median into the big table over median into the empty one."""
        return statistics.median(self.big_seconds) / statistics.median(self.empty_seconds)


def _last_operation(path: str) -> str:
    history = DeltaTable(path).history(1)
    return str(history[0].get("operation", "?")) if history else "?"


def measure_big(
    spark: SparkSession,
    workdir: Path,
    *,
    rows: int,
    batch: int,
    repeat: int,
    per_file: int,
    progress: Callable[[str], None] = lambda _: None,
) -> BigRun:
    """Build the big table under ``workdir`` and time the rounds (module docstring)."""
    big_lake = workdir / "big"
    big_sink = DeltaSink(spark, bench_sink_settings(big_lake))
    big_path = table_path(str(big_lake), RELATION.namespace, RELATION.relation_name)
    started = time.perf_counter()
    build_table(spark, big_sink, big_path, keys=(1, rows), per_file=per_file)
    build = time.perf_counter() - started
    progress(f"big: {rows:,}-row table built in {build:.1f} s")
    empty_seconds: list[float] = []
    big_seconds: list[float] = []
    operations: list[str] = []
    try:
        for round_number in range(repeat):
            lake = workdir / f"empty-{round_number}"
            sink = DeltaSink(spark, bench_sink_settings(lake))
            path = table_path(str(lake), RELATION.namespace, RELATION.relation_name)
            build_table(spark, sink, path, keys=(1, 0), per_file=per_file)
            first = rows + 1 + round_number * batch
            changes = make_batch([], range(first, first + batch), lsn=10 + round_number, revision=1)
            order = [(sink, empty_seconds), (big_sink, big_seconds)]
            for target, seconds in order if round_number % 2 == 0 else order[::-1]:
                began = time.perf_counter()
                target.apply(changes)
                seconds.append(time.perf_counter() - began)
                target.after_apply()
            operations.append(_last_operation(big_path))
            sink.close()
            progress(
                f"big: round {round_number + 1}: empty {empty_seconds[-1]:.2f} s, "
                f"{rows:,} rows {big_seconds[-1]:.2f} s ({operations[-1]})"
            )
    finally:
        big_sink.close()
    return BigRun(rows, batch, empty_seconds, big_seconds, build, operations)
