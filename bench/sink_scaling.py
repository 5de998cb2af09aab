"""Benchmark 3 of issue 6: how a MERGE of one batch scales with the size of the Delta table.

Run: ``python -m bench.sink_scaling`` (``python -m bench sink``; ``--help`` for the knobs).
The default (1M and 10M rows) takes about ten minutes on two cores; ``--sizes 100000,1000000``
takes two.

Method
------
1. Start an embedded Sail session (``sink.create_spark_session``), as the daemon does.
2. For each table size N: create the table through ``DeltaSink`` itself (one insert batch
   of the benchmark relation, so the schema, metadata columns and table features are
   exactly the daemon's), then append N rows with Spark in ``N / --rows-per-file`` files
   of consecutive keys. That is the layout the daemon's own inserts of a serial key
   produce, and it gives Delta's per-file min/max statistics something to prune on.
3. Apply batches of ``--batch`` changes (80% updates, 10% deletes of existing rows, 10%
   inserts of new keys) through ``DeltaSink.apply``: planning, the Arrow source view and
   the one MERGE per table, i.e. exactly the sink path of the daemon. Keys are either
   *clustered* (one contiguous run of existing keys, as a backlog of recent rows gives) or
   *random* (spread uniformly over the table). Each repetition touches different keys,
   and every batch carries a newer LSN than the table holds, so no row is skipped by the
   replay guard.
4. Print the median seconds per batch, and the ratio of the largest table to the smallest
   for clustered keys (target: 10M within 2x of 1M). For reference, an append of the
   same number of rows (``DataFrame.write.mode("append")``) into the largest table.

Each size is measured in the layouts ``--layouts`` names: *plain* (no partitions, a MERGE
rewrites every file holding a row it changes: copy-on-write), *partitioned* by key range
(``sink.partition_by_key`` with ``--key-bucket-width``, by default one partition per
``--rows-per-file`` keys), where each MERGE names the partitions of its rows, and
*deletion-vectors* (``sink.deletion_vectors``: a MERGE marks the rows it replaces or
deletes in deletion vectors and writes only the batch's rows: merge-on-read). With plain
and deletion-vectors both measured, the ratio of their random-key batches at the largest
size is reported (target: deletion vectors at least 3x faster).

5. Reads after many batches (``--read-batches``, deletion-vectors layout, largest size):
   apply that many more random-key batches as the sink worker does (each ``apply``
   followed by ``after_apply``: compactions and deletion-vector purges as they come due,
   timed apart), then time a full read of every column through Spark SQL (Sail) and
   through delta-rs ``QueryBuilder``; purge the table (``compaction.
   purge_deletion_vectors``, the rewrite a purge does), time the reads again, and report
   after / freshly purged (target: at most 1.5x).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql import SparkSession

from bench.report import Figure, Ratio, median_figure, print_report
from bench.settings import bench_sink_settings, bench_spark_settings
from decoder import (
    ColumnKind,
    ColumnValue,
    Lsn,
    Oid,
    Relation,
    RelationColumn,
    RowChange,
    RowOperation,
    TupleData,
    datetime_to_pg_timestamp,
)
from sink import (
    Batch,
    DeltaSink,
    SinkSettings,
    create_spark_session,
    stop_spark_session,
    table_path,
)
from sink.lake.tables import LakeTables
from sink.upkeep.compaction import purge_deletion_vectors

SCALING_TARGET: Final = 2.0
VECTORS_SPEEDUP_TARGET: Final = 3.0
"""Copy-on-write over deletion vectors, random keys, at the largest size: at least this."""
READ_SLOWDOWN_TARGET: Final = 1.5
"""A read after ``--read-batches`` batches over one of the freshly purged table: at most."""
LAYOUTS: Final = ("plain", "partitioned", "deletion-vectors")
READ_QUERY: Final = (
    "SELECT count(*) AS n, sum(id) AS ids, sum(account) AS accounts, sum(amount) AS amounts,"
    " max(updated_at) AS newest, sum(length(note)) AS notes FROM {table}"
)
"""A full read of every data column, in SQL both Spark and DataFusion take."""
_INT8, _INT4, _NUMERIC, _TIMESTAMPTZ, _TEXT = 20, 23, 1700, 1184, 25
# numeric(12, 2): PostgreSQL stores (precision << 16 | scale) + VARHDRSZ as the typmod.
_NUMERIC_12_2: Final = ((12 << 16) | 2) + 4

RELATION: Final = Relation(
    xid=None,
    relation_id=Oid(16384),
    namespace="public",
    relation_name="bench_rows",
    replica_identity="d",
    columns=(
        RelationColumn(1, "id", Oid(_INT8), -1),
        RelationColumn(0, "account", Oid(_INT4), -1),
        RelationColumn(0, "amount", Oid(_NUMERIC), _NUMERIC_12_2),
        RelationColumn(0, "updated_at", Oid(_TIMESTAMPTZ), -1),
        RelationColumn(0, "note", Oid(_TEXT), -1),
    ),
)
"""The benchmark table of ``bench.workload`` as pgoutput describes it."""


def _text(value: str | None) -> ColumnValue:
    if value is None:
        return ColumnValue(ColumnKind.NULL)
    return ColumnValue(ColumnKind.TEXT, value.encode())


def _row(key: int, revision: int) -> TupleData:
    return TupleData(
        (
            _text(str(key)),
            _text(str(key % 1000)),
            _text(f"{key % 100000 / 100 + revision:.2f}"),
            _text(f"2025-01-0{1 + revision % 9} 00:00:00+00"),
            _text(f"rev {revision} of {key}"),
        )
    )


def _key_only(key: int) -> TupleData:
    null = ColumnValue(ColumnKind.NULL)
    return TupleData((_text(str(key)), null, null, null, null))


def make_batch(
    existing: Sequence[int], new_keys: Sequence[int], *, lsn: int, revision: int
) -> Batch:
    """One transaction: update ``existing`` rows (every 9th is deleted), insert ``new_keys``."""
    commit = datetime_to_pg_timestamp(dt.datetime.now(dt.UTC))
    changes: list[RowChange] = []

    def add(op: RowOperation, new: TupleData | None, old: TupleData | None) -> None:
        changes.append(
            RowChange(
                op=op,
                relation=RELATION,
                new=new,
                old=old,
                old_kind="K" if old is not None else None,
                commit_lsn=Lsn(lsn),
                commit_time=commit,
                ordinal=len(changes),
            )
        )

    for position, key in enumerate(existing):
        if position % 9 == 8:
            add("delete", None, _key_only(key))
        else:
            add("update", _row(key, revision), None)
    for key in new_keys:
        add("insert", _row(key, revision), None)
    return Batch(
        changes=tuple(changes), durable_lsn=Lsn(lsn), transaction_count=1, last_commit_time=commit
    )


def build_table(
    spark: SparkSession,
    sink: DeltaSink,
    path: str,
    *,
    keys: tuple[int, int],
    per_file: int,
    bucket_width: int | None = None,
) -> None:
    """Create the table through ``sink``, then append rows ``keys[0]..keys[1]`` with Spark.

    The rows hold what ``bench.workload`` writes into PostgreSQL for the same keys, so a
    Delta table seeded here equals a source table seeded there; their LSN is 2, below any
    real commit. With ``bucket_width`` the sink's settings must partition the table by key
    range with that width; the rows get their bucket and go to their partition.
    """
    # A batch whose only change deletes an absent row creates the table and writes nothing.
    creation = make_batch([keys[1] + 1], [], lsn=1, revision=0)
    only = creation.changes[0]
    assert isinstance(only, RowChange)
    deletion = RowChange(
        op="delete",
        relation=RELATION,
        new=None,
        old=_key_only(keys[1] + 1),
        old_kind="K",
        commit_lsn=only.commit_lsn,
        commit_time=only.commit_time,
        ordinal=0,
    )
    sink.apply(
        Batch(
            changes=(deletion,),
            durable_lsn=creation.durable_lsn,
            transaction_count=1,
            last_commit_time=creation.last_commit_time,
        )
    )
    schema = spark.read.format("delta").load(path).schema
    rows = keys[1] - keys[0] + 1
    files = max(1, rows // per_file)
    values: tuple[str, ...] = (
        "id",
        "id % 1000",
        "id % 100000 / 100.0",
        "timestamp_seconds(1735689600 + id)",
        "md5(CAST(id AS STRING))",
        "2",
        "TIMESTAMP '2025-01-01 00:00:00'",
        "0",
    )
    if bucket_width is not None:
        # floor(id / width), as the sink computes it; `div` would round negative keys up.
        values += (f"(id - pmod(id, {int(bucket_width)})) div {int(bucket_width)}",)
    # Same names and types as the table the sink created (data columns, then LSN, commit
    # time and ordinal); a layout the sink changes shows up here as an error, not bad data.
    if len(schema.fields) != len(values):
        raise RuntimeError(f"unexpected table schema {schema.simpleString()}")
    frame = spark.range(keys[0], keys[1] + 1, 1, files).selectExpr(
        *[
            f"CAST({value} AS {field.dataType.simpleString()}) AS `{field.name}`"
            for value, field in zip(values, schema.fields, strict=True)
        ]
    )
    writer = frame.write.format("delta").mode("append")
    if bucket_width is not None:
        writer = writer.partitionBy(schema.fields[-1].name)
    writer.save(path)


def bucketed_settings(lake: str, width: int | None, *, vectors: bool = False) -> SinkSettings:
    """The sink settings of the benchmark table: plain, partitioned by key range, or (with
    ``vectors``) written with deletion vectors."""
    extra: dict[str, object] = {"deletion_vectors": [RELATION.qualified_name]} if vectors else {}
    if width is None:
        return bench_sink_settings(lake, **extra)
    return bench_sink_settings(
        lake, partition_by_key={RELATION.qualified_name: {"width": width}}, **extra
    )


def layout_description(width: int | None) -> str:
    """The table layout ``bucketed_settings`` gives, for a benchmark's report."""
    return f"partitioned by floor(id / {width:,})" if width else "unpartitioned"


def time_merges(
    sink: DeltaSink,
    *,
    rows: int,
    batch: int,
    clustered: bool,
    repeat: int,
    seed: int,
    lsn: int,
    upkeep: list[float] | None = None,
) -> list[float]:
    """Apply ``repeat`` batches of ``batch`` changes; seconds of each ``apply``.

    With ``upkeep``, each ``apply`` is followed by ``after_apply`` (compactions and purges
    due, as the sink worker runs them once a batch is durable), its seconds appended there.
    Keys already deleted by an earlier batch of the same ``seed`` are not chosen again only
    by chance: a delete of an absent row, or an update of one, changes nothing.
    """
    chooser = random.Random(seed)
    existing_count = batch * 9 // 10
    seconds = []
    for run in range(repeat):
        if clustered:
            first = chooser.randrange(1, rows - existing_count)
            existing = list(range(first, first + existing_count))
        else:
            existing = sorted(chooser.sample(range(1, rows + 1), existing_count))
        # New keys continue the serial key, as PostgreSQL's inserts do; each batch its own.
        start = rows + 1 + (seed * repeat + run) * batch
        new_keys = list(range(start, start + batch - existing_count))
        changes = make_batch(existing, new_keys, lsn=lsn + run, revision=run + 1)
        started = time.perf_counter()
        sink.apply(changes)
        seconds.append(time.perf_counter() - started)
        if upkeep is not None:
            started = time.perf_counter()
            sink.after_apply()
            upkeep.append(time.perf_counter() - started)
    return seconds


def time_reads(spark: SparkSession, path: str, repeat: int) -> tuple[list[float], list[float]]:
    """Seconds of ``repeat`` full reads (``READ_QUERY``) through Spark SQL and through
    delta-rs ``QueryBuilder``; both must see the same rows."""
    through_spark, through_delta_rs = [], []
    answers = set()
    for _ in range(repeat):
        started = time.perf_counter()
        row = spark.sql(READ_QUERY.format(table=f"delta.`{path}`")).collect()[0]
        through_spark.append(time.perf_counter() - started)
        answers.add((int(row["n"]), int(row["ids"])))
        started = time.perf_counter()
        table = DeltaTable(path)
        result = QueryBuilder().register("t", table).execute(READ_QUERY.format(table="t"))
        found = pa.table(result.read_all()).to_pylist()[0]
        through_delta_rs.append(time.perf_counter() - started)
        answers.add((int(found["n"]), int(found["ids"])))
    if len(answers) != 1:
        raise RuntimeError(f"Spark and delta-rs read different tables: {sorted(answers)}")
    return through_spark, through_delta_rs


def measure_reads_after_batches(
    spark: SparkSession,
    sink: DeltaSink,
    settings: SinkSettings,
    path: str,
    *,
    rows: int,
    batch: int,
    batches: int,
    repeat: int,
    lsn: int,
) -> tuple[list[Figure], list[Ratio]]:
    """Step 5 of the method: reads after ``batches`` random-key batches vs freshly purged."""
    upkeep: list[float] = []
    merges = time_merges(
        sink,
        rows=rows,
        batch=batch,
        clustered=False,
        repeat=batches,
        seed=7,
        lsn=lsn,
        upkeep=upkeep,
    )
    after_spark, after_delta_rs = time_reads(spark, path, repeat)
    lake = LakeTables(spark, settings.metadata)
    started = time.perf_counter()
    purge_deletion_vectors(lake, path)
    purge = time.perf_counter() - started
    fresh_spark, fresh_delta_rs = time_reads(spark, path, repeat)
    name = f"deletion-vectors, {rows:,} rows"
    figures = [
        median_figure(f"{name}: MERGE during {batches} random batches", merges, "s/batch"),
        median_figure(
            f"{name}: upkeep during them (compactions, purges)", [sum(upkeep)], "s total"
        ),
        median_figure(f"{name}: read after them, Spark SQL", after_spark, "s"),
        median_figure(f"{name}: read after them, delta-rs QueryBuilder", after_delta_rs, "s"),
        median_figure(f"{name}: purge (rewrite of the live rows)", [purge], "s"),
        median_figure(f"{name}: read freshly purged, Spark SQL", fresh_spark, "s"),
        median_figure(f"{name}: read freshly purged, delta-rs QueryBuilder", fresh_delta_rs, "s"),
    ]
    ratios = [
        Ratio(
            f"read after {batches} batches / freshly purged, {reader}",
            _median(after) / _median(fresh),
            target=READ_SLOWDOWN_TARGET,
            higher_is_better=False,
        )
        for reader, after, fresh in (
            ("Spark SQL", after_spark, fresh_spark),
            ("delta-rs QueryBuilder", after_delta_rs, fresh_delta_rs),
        )
    ]
    return figures, ratios


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def time_append(spark: SparkSession, path: str, rows: int) -> float:
    """Seconds to append ``rows`` rows of the table's shape with the DataFrame writer."""
    schema = spark.read.format("delta").load(path).schema
    frame = spark.read.format("delta").load(path).limit(rows)
    data = frame.toArrow()
    started = time.perf_counter()
    spark.createDataFrame(data, schema=schema).write.format("delta").mode("append").save(path)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when it measured."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.sink_scaling", description=__doc__)
    parser.add_argument(
        "--sizes", default="1000000,10000000", help="table sizes, comma separated; first = baseline"
    )
    parser.add_argument("--batch", type=int, default=10_000, help="changes per batch")
    parser.add_argument("--rows-per-file", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3, help="batches per size and layout")
    parser.add_argument(
        "--layouts",
        default=",".join(LAYOUTS),
        help=f"table layouts to measure, comma separated: {', '.join(LAYOUTS)}",
    )
    parser.add_argument(
        "--read-batches",
        type=int,
        default=100,
        help="random batches before the read comparison (deletion-vectors layout, largest "
        "size); 0 skips it",
    )
    parser.add_argument("--read-repeat", type=int, default=3, help="reads per reader and state")
    parser.add_argument(
        "--key-bucket-width",
        type=int,
        help="keys per partition of the partitioned layout (default: --rows-per-file)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON line at the end")
    parser.add_argument("--workdir", type=Path, help="keep the lake here (default: tmp)")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    layouts = [layout.strip() for layout in args.layouts.split(",") if layout.strip()]
    unknown = set(layouts) - set(LAYOUTS)
    if unknown:
        parser.error(f"unknown layouts: {', '.join(sorted(unknown))}")
    width = args.key_bucket_width or args.rows_per_file

    figures: list[Figure] = []
    clustered_median: dict[tuple[str, int], float] = {}
    random_median: dict[tuple[str, int], float] = {}
    read_ratios: list[Ratio] = []
    append_seconds = 0.0
    with contextlib.ExitStack() as stack:
        workdir: Path = args.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="w2d-bench-sink-"))
        )
        spark = create_spark_session(bench_spark_settings())
        stack.callback(stop_spark_session, spark)
        for layout_name, size in [(layout, size) for layout in layouts for size in sizes]:
            bucket_width = width if layout_name == "partitioned" else None
            lake = str(workdir / f"lake-{layout_name}-{size}")
            vectors = layout_name == "deletion-vectors"
            settings = bucketed_settings(lake, bucket_width, vectors=vectors)
            sink = DeltaSink(spark, settings)
            path = table_path(lake, RELATION.namespace, RELATION.relation_name)
            started = time.perf_counter()
            build_table(
                spark,
                sink,
                path,
                keys=(1, size),
                per_file=args.rows_per_file,
                bucket_width=bucket_width,
            )
            print(
                f"built {size:,}-row {layout_name} table in {time.perf_counter() - started:.1f} s",
                flush=True,
            )
            for seed, clustered in enumerate((True, False)):
                layout = "clustered" if clustered else "random"
                runs = time_merges(
                    sink,
                    rows=size,
                    batch=args.batch,
                    clustered=clustered,
                    repeat=args.repeat,
                    seed=seed,
                    lsn=10 + seed * args.repeat,
                )
                figure = median_figure(
                    f"{layout_name}, {size:,} rows, {layout} keys", runs, "s/batch"
                )
                print(f"  {figure.name}: {figure.value:.2f} s", flush=True)
                figures.append(figure)
                (clustered_median if clustered else random_median)[layout_name, size] = figure.value
            if size == sizes[-1] and layout_name == layouts[0]:
                append_seconds = time_append(spark, path, args.batch)
            if size == sizes[-1] and vectors and args.read_batches > 0:
                found, read_ratios = measure_reads_after_batches(
                    spark,
                    sink,
                    settings,
                    path,
                    rows=size,
                    batch=args.batch,
                    batches=args.read_batches,
                    repeat=args.read_repeat,
                    lsn=10 + 2 * args.repeat,
                )
                for figure in found:
                    print(f"  {figure.name}: {figure.value:.2f} {figure.unit}", flush=True)
                figures += found
    figures.append(
        median_figure(f"append {args.batch:,} rows into {sizes[-1]:,}", [append_seconds], "s")
    )
    smallest, largest = sizes[0], sizes[-1]
    ratios = [
        Ratio(
            f"{layout_name}, clustered batch: {largest:,} / {smallest:,} rows",
            clustered_median[layout_name, largest] / clustered_median[layout_name, smallest],
            target=SCALING_TARGET,
            higher_is_better=False,
        )
        for layout_name in layouts
    ]
    if {"plain", "deletion-vectors"} <= set(layouts):
        ratios.append(
            Ratio(
                f"random batch at {largest:,} rows: copy-on-write (plain) / deletion vectors",
                random_median["plain", largest] / random_median["deletion-vectors", largest],
                target=VECTORS_SPEEDUP_TARGET,
            )
        )
    ratios += read_ratios
    facts: dict[str, object] = {
        "batch": f"{args.batch:,} changes (80% update, 10% delete, 10% insert), one MERGE",
        "files": f"{args.rows_per_file:,} consecutive keys per file",
        "partitioned layout": f"floor(id / {width:,}) (sink.partition_by_key)",
        "deletion-vectors layout": "sink.deletion_vectors (merge-on-read), unpartitioned",
        "upkeep": "sink.compact_after_writes as configured by default; purge at "
        "compaction.PURGE_AT of the stored rows deleted",
    }
    print_report(
        "Benchmark 3: MERGE of one batch vs table size (embedded Sail)",
        figures,
        ratios,
        facts=facts,
        as_json=args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
