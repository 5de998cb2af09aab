"""Planning benchmark: the sink's CPU path of one batch: columnar, per-column converters, generic.

Run: ``python -m bench.plan`` (``python -m bench plan``; ``--help`` for the knobs). Needs
neither PostgreSQL nor Spark and takes well under a minute.

Method
------
1. Build a batch of ``--changes`` row changes in process, shaped like ``bench.workload``'s
   backlog: the ``bench_rows`` relation (bigint key, int, numeric(12, 2), timestamptz,
   32-character text), transactions of 1000 changes of which 60% insert new rows, 30%
   update rows of the transaction before and 10% delete others of it (a delete carries
   the key-only old tuple REPLICA IDENTITY DEFAULT sends). Every tuple is made with
   ``TupleData.from_wire`` over the TupleData bytes pgoutput sends, as a replayed
   transaction's are, once in the text protocol and once in the binary one.
2. Check that both paths plan the batch and build its Arrow source tables identically
   (``BatchPlan`` equality, Arrow IPC bytes), and that the columnar planner (what the
   sink runs, ``plan_batch(columnar=True)``) builds the same sources in key order; a
   difference exits non-zero.
3. Time ``plan_batch`` followed by ``sink.arrow.source_table`` for every merge step -
   the CPU work ``DeltaSink.apply`` does before its first Spark call - with the
   converters resolved once per relation (the row planner) and with ``generic_values``,
   which converts every value through ``convert_value`` (the path before them), and the
   columnar planner. All three run
   alternately, ``--repeat`` times each on a freshly built batch (``plan_batch`` splits a
   tuple's bytes only once), with the garbage collector on as in the daemon and collected
   before each run.
4. Print the median microseconds per change of each, the speed-up (generic / fast), and
   the columnar planner's speed-up over the row planner with per-column converters.

The generic path shares the folding code, so the ratio measures value conversion and
tuple decoding only; improvements to folding and Arrow building speed up both.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import hashlib
import json
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Final, Literal

import pyarrow as pa
from psycopg.types.numeric import DecimalBinaryDumper

from bench.report import Figure, Ratio, median_figure, print_report
from bench.settings import bench_sink_settings
from bench.sink_scaling import RELATION
from decoder import (
    DECODER_KERNEL,
    Lsn,
    PgTimestamp,
    RowChange,
    RowOperation,
    TupleData,
    ValueDecoder,
    datetime_to_pg_timestamp,
)
from decoder.native import PURE_PYTHON_ENV
from sink import Batch
from sink.engine.arrow import source_table
from sink.planning.fold import plan_batch
from sink.planning.plan import BatchPlan, MergeStep

TRANSACTION: Final = 1000

Protocol = Literal["text", "binary"]
_START: Final = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
_PG_EPOCH: Final = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
_NUMERIC_BINARY: Final = DecimalBinaryDumper(Decimal)


def _row_values(key: int, protocol: Protocol) -> list[bytes]:
    """The column values ``bench.workload`` writes for ``key``, as pgoutput sends them."""
    amount = f"{key % 100_000 / 100:.2f}"
    updated = _START + dt.timedelta(seconds=key)
    note = hashlib.md5(str(key).encode()).hexdigest()  # md5(g::text), as the workload
    if protocol == "text":
        return [
            str(key).encode(),
            str(key % 1000).encode(),
            amount.encode(),
            updated.strftime("%Y-%m-%d %H:%M:%S+00").encode(),
            note.encode(),
        ]
    micros = (updated - _PG_EPOCH) // dt.timedelta(microseconds=1)
    return [
        struct.pack(">q", key),
        struct.pack(">i", key % 1000),
        bytes(_NUMERIC_BINARY.dump(Decimal(amount)) or b""),
        struct.pack(">q", micros),
        note.encode(),
    ]


def _tuple(values: list[bytes | None], protocol: Protocol) -> TupleData:
    """A lazy TupleData over the bytes pgoutput sends for ``values`` (None is NULL)."""
    kind = b"t" if protocol == "text" else b"b"
    parts = [struct.pack(">H", len(values))]
    for value in values:
        parts.append(b"n" if value is None else kind + struct.pack(">I", len(value)) + value)
    return TupleData.from_wire(b"".join(parts), 0)


def make_batch(changes: int, protocol: Protocol) -> Batch:
    """``changes`` row changes in transactions of 1000 (see the module docstring)."""
    commit = datetime_to_pg_timestamp(_START)
    out: list[RowChange] = []
    previous = list(range(1 - TRANSACTION * 6 // 10, 1))  # the seed rows
    next_key = 1
    for number in range(-(-changes // TRANSACTION)):
        inserted = list(range(next_key, next_key + TRANSACTION * 6 // 10))
        next_key += len(inserted)
        updated = previous[: TRANSACTION * 3 // 10]
        deleted = previous[len(updated) : len(updated) + TRANSACTION // 10]
        ops: list[tuple[RowOperation, int]] = [
            *(("insert", key) for key in inserted),
            *(("update", key) for key in updated),
            *(("delete", key) for key in deleted),
        ]
        lsn = Lsn(0x1000_0000 + number * 0x10000)
        for ordinal, (op, key) in enumerate(ops[: changes - len(out)]):
            if op == "delete":
                new, old = (
                    None,
                    _tuple([_row_values(key, protocol)[0], None, None, None, None], protocol),
                )
            else:
                new, old = _tuple(list(_row_values(key, protocol)), protocol), None
            out.append(
                RowChange(
                    op=op,
                    relation=RELATION,
                    new=new,
                    old=old,
                    old_kind="K" if old is not None else None,
                    commit_lsn=lsn,
                    commit_time=PgTimestamp(commit + number),
                    ordinal=ordinal,
                )
            )
        previous = inserted
    return Batch(
        changes=tuple(out),
        durable_lsn=out[-1].commit_lsn,
        transaction_count=-(-changes // TRANSACTION),
        last_commit_time=commit,
    )


_META: Final = bench_sink_settings("unused").metadata


def run(
    batch: Batch, *, generic: bool, decoder: ValueDecoder, columnar: bool = False
) -> tuple[BatchPlan, list[pa.Table]]:
    """What ``DeltaSink.apply`` computes before Spark: the plan and every step's Arrow."""
    plan = plan_batch(
        batch,
        reserved_columns=_META.reserved,
        decoder=decoder,
        generic_values=generic,
        columnar=columnar,
    )
    tables = [
        source_table(table.qualified_name, step, _META)[1]
        for table in plan.tables
        for step in table.steps
        if isinstance(step, MergeStep) and step.row_count
    ]
    return plan, tables


def _by_key(table: pa.Table) -> pa.Table:
    """A MERGE source in key order (the columnar planner orders its rows otherwise)."""
    return table.sort_by([("id", "ascending")])


def _ipc_bytes(table: pa.Table) -> bytes:
    """The table as Arrow IPC bytes, for a byte-for-byte comparison."""
    out = pa.BufferOutputStream()
    with pa.ipc.new_stream(out, table.schema) as writer:
        writer.write_table(table)
    return bytes(out.getvalue().to_pybytes())


def _timed(
    build: Callable[[], Batch], *, generic: bool, decoder: ValueDecoder, columnar: bool = False
) -> float:
    """Microseconds per change of one ``run`` over a freshly built batch."""
    batch = build()
    gc.collect()
    started = time.perf_counter()
    run(batch, generic=generic, decoder=decoder, columnar=columnar)
    return (time.perf_counter() - started) / len(batch.changes) * 1e6


def measure(
    protocol: Protocol, changes: int, repeat: int
) -> tuple[list[float], list[float], list[float]] | str:
    """Row-planner, generic and columnar µs per change, ``repeat`` runs each; a string
    when their results differ."""
    decoder = ValueDecoder()
    fast_plan, fast_tables = run(make_batch(changes, protocol), generic=False, decoder=decoder)
    generic_plan, generic_tables = run(make_batch(changes, protocol), generic=True, decoder=decoder)
    _, columnar_tables = run(
        make_batch(changes, protocol), generic=False, decoder=decoder, columnar=True
    )
    if fast_plan != generic_plan:
        return f"{protocol} protocol: the plans differ"
    if [_ipc_bytes(t) for t in fast_tables] != [_ipc_bytes(t) for t in generic_tables]:
        return f"{protocol} protocol: the Arrow source tables differ"
    if [_ipc_bytes(_by_key(t)) for t in fast_tables] != [
        _ipc_bytes(_by_key(t)) for t in columnar_tables
    ]:
        return f"{protocol} protocol: the columnar planner's Arrow source tables differ"
    fast: list[float] = []
    generic: list[float] = []
    columnar: list[float] = []
    for _ in range(repeat):
        fast.append(_timed(lambda: make_batch(changes, protocol), generic=False, decoder=decoder))
        generic.append(_timed(lambda: make_batch(changes, protocol), generic=True, decoder=decoder))
        columnar.append(
            _timed(
                lambda: make_batch(changes, protocol),
                generic=False,
                decoder=decoder,
                columnar=True,
            )
        )
    return fast, generic, columnar


def _reference_walk_figure(protocol: Protocol, changes: int, repeat: int) -> Figure:
    """The per-column converters' figure with the Python TupleData walk, from a child run."""
    command = [sys.executable, "-m", "bench.plan", "--json", "--no-reference-walk"]
    command += ["--protocol", protocol, "--changes", str(changes), "--repeat", str(repeat)]
    child = subprocess.run(
        command,
        env={**os.environ, PURE_PYTHON_ENV: "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    document = json.loads(child.stdout.strip().splitlines()[-1])
    (figure,) = (
        f for f in document["figures"] if f["name"] == f"{protocol}: per-column converters"
    )
    return median_figure(
        f"{protocol}: per-column converters, Python walk", figure["runs"], "µs/change"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when it measured."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.plan", description=__doc__)
    parser.add_argument("--changes", type=int, default=20_000, help="row changes per batch")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs per path and protocol")
    parser.add_argument(
        "--protocol", choices=("text", "binary", "both"), default="both", help="pgoutput format"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON line at the end")
    parser.add_argument(
        "--no-reference-walk",
        action="store_true",
        help="skip the child run with the Python TupleData walk (WAL2DELTA_PURE_PYTHON=1)",
    )
    args = parser.parse_args(argv)
    protocols: list[Protocol] = ["text", "binary"] if args.protocol == "both" else [args.protocol]

    figures: list[Figure] = []
    ratios: list[Ratio] = []
    for protocol in protocols:
        measured = measure(protocol, args.changes, args.repeat)
        if isinstance(measured, str):
            print(f"cannot compare: {measured}", file=sys.stderr)
            return 1
        fast_runs, generic_runs, columnar_runs = measured
        fast = median_figure(f"{protocol}: per-column converters", fast_runs, "µs/change")
        generic = median_figure(f"{protocol}: generic convert_value", generic_runs, "µs/change")
        columnar = median_figure(f"{protocol}: columnar planner", columnar_runs, "µs/change")
        figures += [generic, fast, columnar]
        ratios.append(Ratio(f"{protocol}: speed-up (generic / fast)", generic.value / fast.value))
        ratios.append(
            Ratio(
                f"{protocol}: columnar speed-up (per-column converters / columnar)",
                fast.value / columnar.value,
            )
        )
    if DECODER_KERNEL == "compiled" and not args.no_reference_walk:
        # The same run with the Python reference walk (decoder.native), in a child process:
        # the form is chosen once, at import.
        for protocol in protocols:
            reference = _reference_walk_figure(protocol, args.changes, args.repeat)
            compiled = next(f for f in figures if f.name == f"{protocol}: per-column converters")
            figures.append(reference)
            ratios.append(
                Ratio(
                    f"{protocol}: compiled walk speed-up (Python walk / compiled)",
                    reference.value / compiled.value,
                )
            )
    facts: dict[str, object] = {
        "batch": f"{args.changes:,} changes (60% insert, 30% update, 10% delete), "
        f"transactions of {TRANSACTION}",
        "measured": "plan_batch + Arrow source tables (sink.arrow.source_table), "
        "identical results checked",
        "baseline": "the same code with generic_values=True (it shares the folding and "
        "Arrow speed-ups, so the ratio understates the gain over the code before them); "
        "the columnar planner (what the sink runs: plan_batch(columnar=True)) against the "
        "row planner with per-column converters, its reference",
    }
    print_report(
        "Planning: per-column converters vs generic convert_value (no Spark)",
        figures,
        ratios,
        facts=facts,
        as_json=args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
