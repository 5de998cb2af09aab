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

Each size is measured in two layouts (``--layouts``): *plain* (no partitions) and
*partitioned* by key range (``sink.partition_by_key`` with ``--key-bucket-width``, by
default one partition per ``--rows-per-file`` keys), where each MERGE names the partitions
of its rows.
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

SCALING_TARGET: Final = 2.0
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


def bucketed_settings(lake: str, width: int | None) -> SinkSettings:
    """The sink settings of the benchmark table: plain, or partitioned by key range."""
    if width is None:
        return bench_sink_settings(lake)
    return bench_sink_settings(lake, partition_by_key={RELATION.qualified_name: {"width": width}})


def layout_description(width: int | None) -> str:
    """The table layout ``bucketed_settings`` gives, for a benchmark's report."""
    return f"partitioned by floor(id / {width:,})" if width else "unpartitioned"


def time_merges(
    sink: DeltaSink, *, rows: int, batch: int, clustered: bool, repeat: int, seed: int, lsn: int
) -> list[float]:
    """Apply ``repeat`` batches of ``batch`` changes; seconds of each ``apply``."""
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
    return seconds


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
        default="plain,partitioned",
        help="table layouts to measure, comma separated: plain, partitioned",
    )
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
    unknown = set(layouts) - {"plain", "partitioned"}
    if unknown:
        parser.error(f"unknown layouts: {', '.join(sorted(unknown))}")
    width = args.key_bucket_width or args.rows_per_file

    figures: list[Figure] = []
    clustered_median: dict[tuple[str, int], float] = {}
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
            sink = DeltaSink(spark, bucketed_settings(lake, bucket_width))
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
                if clustered:
                    clustered_median[layout_name, size] = figure.value
            if size == sizes[-1] and layout_name == layouts[0]:
                append_seconds = time_append(spark, path, args.batch)
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
    facts: dict[str, object] = {
        "batch": f"{args.batch:,} changes (80% update, 10% delete, 10% insert), one MERGE",
        "files": f"{args.rows_per_file:,} consecutive keys per file",
        "partitioned layout": f"floor(id / {width:,}) (sink.partition_by_key)",
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
