"""The bare engine's floor for many tables (issue 40): a MERGE and an append per table.

``python -m bench tables`` measures this in the same run as the daemon, in its own process
(the daemon runs in a child): one Spark session - embedded Sail as the daemon starts it,
or the ``--engine`` endpoint - and N small Delta tables with the columns of the daemon's
tables of the benchmark shape (the five data columns of ``bench.workload`` and the
metadata columns the sink adds: commit LSN, commit time, ordinal). Each table is created
and seeded with one append of its share (untimed), as the daemon's table holds rows after
its first batch. Then, per table, one write of its share of the backlog (the same row
count, the same columns), four ways, one after the other:

* ``merge, serial``: each table's share as a MERGE source - a Parquet file the engine
  reads (``parquet.`path```) with the embedded engine, a temporary view of the Arrow table
  sent inline through Spark Connect otherwise, as the sink does (``sink/lake/sources.py``) -
  and one ``MERGE INTO ... ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED
  THEN INSERT *``, table after table;
* ``merge, concurrent``: the same from ``concurrency`` threads (``sink.concurrency``);
* ``append, serial`` and ``append, concurrent``: one DataFrame append of the share, as
  the sink's append path writes (``sink/steps/step_append.py``, decision 0128): inline
  (``createDataFrame(arrow).write.format("delta").mode("append")``) up to
  ``INLINE_APPEND_BYTES``, from a Parquet file the embedded engine reads above it.

The share's rows follow the mix: insert-only shares are new keys only; the 70/30 mix's are
70% new keys and 30% keys the table holds (a MERGE updates those; an append writes the same
number of rows, as the product's append path writes a batch's inserts). Every pass writes
keys no earlier pass wrote. The figure is seconds per table: a pass's wall time over N, the
median of a few rounds of the pass where N is small (``rounds_for``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.parquet as pq

from sink import MetadataColumns
from sink.lake.sources import INLINE_APPEND_BYTES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PASSES: Final = ("merge, serial", "merge, concurrent", "append, serial", "append, concurrent")
"""The floor's passes, in the order they run."""
_EPOCH: Final = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True, slots=True)
class Floor:
    """Seconds per table of each pass (``PASSES``) over ``tables`` tables."""

    tables: int
    rows_per_table: int
    updated_per_table: int
    """Of ``rows_per_table``, the rows whose key the table holds (a MERGE updates them)."""
    concurrency: int
    seconds: dict[str, float]
    """Pass -> wall time of the pass / tables."""
    setup_seconds: float
    load: float
    """The 1-minute load average when the floor's passes started."""


def share_table(meta: MetadataColumns, keys: Sequence[int], *, lsn: int, mark: int = 0) -> pa.Table:
    """Rows of ``keys`` in the columns and types of the daemon's benchmark tables.

    The values follow ``bench.workload``'s rows; ``mark`` varies the amount so an update
    changes the row.
    """
    ids = pa.array(keys, pa.int64())
    count = len(keys)
    commit = _EPOCH + dt.timedelta(seconds=lsn)
    columns = {
        "id": ids,
        "account": pa.array([k % 1000 for k in keys], pa.int32()),
        "amount": pa.array(
            [Decimal(k % 100_000 + mark * 100).scaleb(-2) for k in keys], pa.decimal128(12, 2)
        ),
        "updated_at": pa.array(
            [_EPOCH + dt.timedelta(seconds=k) for k in keys], pa.timestamp("us", tz="UTC")
        ),
        "note": pa.array([f"{k:032x}" for k in keys], pa.string()),
        meta.lsn: pa.array([lsn] * count, pa.int64()),
        meta.commit_time: pa.array([commit] * count, pa.timestamp("us", tz="UTC")),
        meta.ordinal: pa.array(range(count), pa.int64()),
    }
    return pa.table(columns)


class _Writer:
    """One session's bare writes: MERGE sources as the sink hands them to the engine."""

    def __init__(self, spark: SparkSession, *, files: Path | None) -> None:
        self._spark = spark
        self._files = files
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()

    def _number(self) -> int:
        with self._lock:
            return next(self._numbers)

    @contextmanager
    def source(self, rows: pa.Table) -> Iterator[str]:
        """A relation over ``rows`` for the block, as the sink hands a source to the engine:
        a Parquet file the embedded engine reads, a temporary view of rows sent inline
        otherwise."""
        number = self._number()
        if self._files is None:
            name = f"__floor_source_{number}"
            self._spark.createDataFrame(rows).createOrReplaceTempView(name)
            try:
                yield f"`{name}`"
            finally:
                self._spark.catalog.dropTempView(name)
            return
        file = self._file(rows, number)
        try:
            yield f"parquet.`{file}`"
        finally:
            file.unlink(missing_ok=True)

    def _file(self, rows: pa.Table, number: int) -> Path:
        """``rows`` written as the sink writes a source file (``sources.py``)."""
        assert self._files is not None
        file = self._files / f"{number}.parquet"
        pq.write_table(
            rows, str(file), compression="none", use_dictionary=False, write_statistics=False
        )
        return file

    def append(self, path: str, rows: pa.Table) -> None:
        """One DataFrame append of ``rows`` (a new table when ``path`` has none), as the
        sink's append path hands rows to the engine (``LakeTables.append_rows``): inline
        up to ``INLINE_APPEND_BYTES``, otherwise from a Parquet file the embedded engine
        reads."""
        if self._files is None or rows.nbytes <= INLINE_APPEND_BYTES:
            frame = self._spark.createDataFrame(rows)
            frame.write.format("delta").mode("append").save(path)
            return
        file = self._file(rows, self._number())
        try:
            frame = self._spark.read.format("parquet").load(str(file))
            frame.write.format("delta").mode("append").save(path)
        finally:
            file.unlink(missing_ok=True)

    def merge(self, path: str, rows: pa.Table) -> None:
        """One MERGE of ``rows`` into the table at ``path`` by ``id``."""
        with self.source(rows) as source:
            self._spark.sql(
                f"MERGE INTO delta.`{path}` AS t USING {source} AS s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
            )


def rounds_for(tables: int) -> int:
    """Rounds of each pass: enough writes for a median where there are few tables (five
    rounds for one table, four for five, one from 20 tables on)."""
    return max(1, min(5, 20 // tables))


def measure_floor(
    spark: SparkSession,
    workdir: Path,
    meta: MetadataColumns,
    *,
    tables: int,
    rows_per_table: int,
    updated_per_table: int,
    concurrency: int,
    embedded: bool,
    progress: Callable[[str], None] = lambda _: None,
) -> Floor:
    """Create ``tables`` tables under ``workdir`` and time the passes (module docstring).

    Args:
        rows_per_table: rows of one table's share (at least 1).
        updated_per_table: of them, how many update rows the table holds (the rest are new
            keys); the seed holds at least that many.
        embedded: the engine reads this machine's files (MERGE sources as Parquet files).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    files = Path(tempfile.mkdtemp(prefix="floor-sources-", dir=workdir)) if embedded else None
    writer = _Writer(spark, files=files)
    paths = [str(workdir / f"floor_{number:04d}") for number in range(tables)]
    seed = max(rows_per_table, updated_per_table)
    started = time.perf_counter()
    for path in paths:
        writer.append(path, share_table(meta, range(1, seed + 1), lsn=1))
    setup = time.perf_counter() - started
    progress(f"floor: {tables} tables created in {setup:.1f} s")
    inserted = rows_per_table - updated_per_table
    seconds: dict[str, float] = {}
    rounds = rounds_for(tables)
    load = os.getloadavg()[0]
    for number, name in enumerate(PASSES):
        write = writer.merge if name.startswith("merge") else writer.append
        timed = []
        for round_number in range(rounds):
            # New keys above the seed and every earlier write's; updates of the seed's rows.
            first_new = seed + 1 + (number * rounds + round_number) * inserted
            keys = [*range(1, updated_per_table + 1), *range(first_new, first_new + inserted)]
            lsn = 2 + number * rounds + round_number
            rows = share_table(meta, keys, lsn=lsn, mark=lsn)
            started = time.perf_counter()
            if name.endswith("serial") or concurrency <= 1:
                for path in paths:
                    write(path, rows)
            else:
                with ThreadPoolExecutor(concurrency, thread_name_prefix="floor") as pool:
                    list(pool.map(lambda path: write(path, rows), paths))  # noqa: B023
            timed.append((time.perf_counter() - started) / tables)
        seconds[name] = statistics.median(timed)
        progress(f"floor: {name}: {seconds[name] * 1000:.1f} ms a table ({rounds} rounds)")
    return Floor(
        tables=tables,
        rows_per_table=rows_per_table,
        updated_per_table=updated_per_table,
        concurrency=concurrency,
        seconds=seconds,
        setup_seconds=setup,
        load=load,
    )


def floor_in_child(
    workdir: Path,
    *,
    tables: int,
    rows_per_table: int,
    updated_per_table: int,
    concurrency: int,
    engine: str | None,
    progress: Callable[[str], None] = lambda _: None,
) -> Floor:
    """``measure_floor`` in a process of its own (``python -m bench.table_floor``), with
    the engine the daemon is configured with: the benchmark's process stays without an
    engine, whose memory a daemon started from it would count as its own peak RSS (Linux
    carries a parent's high-water mark into its child's ``ru_maxrss``).

    Raises:
        RuntimeError: the child failed (its output is in the message).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    result = workdir / "floor.json"
    command = [
        sys.executable,
        "-m",
        "bench.table_floor",
        f"--workdir={workdir}",
        f"--tables={tables}",
        f"--rows-per-table={rows_per_table}",
        f"--updated-per-table={updated_per_table}",
        f"--concurrency={concurrency}",
        f"--output={result}",
        *([f"--engine={engine}"] if engine else []),
    ]
    root = Path(__file__).resolve().parents[1]
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
        "RUST_LOG": "warn",
    }
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=root,
        env=environment,
    ) as child:
        assert child.stdout is not None
        lines = []
        for line in child.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("floor:"):
                progress(line.rstrip("\n"))
    if child.returncode != 0 or not result.exists():
        raise RuntimeError(
            f"the engine floor failed (exit {child.returncode}):\n" + "\n".join(lines[-30:])
        )
    return Floor(**json.loads(result.read_text()))


def main(argv: list[str] | None = None) -> int:
    """One ``measure_floor``, its ``Floor`` written as JSON to ``--output``."""
    parser = argparse.ArgumentParser(prog="python -m bench.table_floor", description=__doc__)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--tables", type=int, required=True)
    parser.add_argument("--rows-per-table", type=int, required=True)
    parser.add_argument("--updated-per-table", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--engine", metavar="URL", help="Spark Connect sc://HOST:PORT")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    from bench.settings import bench_sink_settings, bench_spark_settings
    from daemon.logging import configure_engine_logging
    from sink import create_spark_session, stop_spark_session
    from sink.engine.spark import is_embedded

    configure_engine_logging("warning")  # Sail logs every query at info
    settings = bench_spark_settings()
    if args.engine is not None:
        settings = replace(settings, mode="connect", url=args.engine)
    spark = create_spark_session(settings)
    try:
        floor = measure_floor(
            spark,
            args.workdir,
            bench_sink_settings(args.workdir / "unused").metadata,
            tables=args.tables,
            rows_per_table=args.rows_per_table,
            updated_per_table=args.updated_per_table,
            concurrency=args.concurrency,
            embedded=is_embedded(spark),
            progress=lambda line: print(line, flush=True),
        )
    finally:
        stop_spark_session(spark)
    args.output.write_text(json.dumps(asdict(floor)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
