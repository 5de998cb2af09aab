"""Every benchmark runs end to end on a tiny workload, so none of them rots unnoticed.

These are smoke runs, not measurements: they check that each command completes, checks
its own results (row counts, identical plans) and reports its ratio against the baseline
of the same run. Nothing here asserts a time or a speed.
"""

from __future__ import annotations

import pytest

from tests.support.benchmarks import ratio_names, run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_the_planning_benchmark_checks_both_paths_agree_and_reports_their_ratio() -> None:
    report = run_benchmark("plan", "--changes", "1000", "--repeat", "1")
    assert ratio_names(report) == [
        "text: speed-up (generic / fast)",
        "text: columnar speed-up (per-column converters / columnar)",
        "binary: speed-up (generic / fast)",
        "binary: columnar speed-up (per-column converters / columnar)",
        # The same run with the Python reference walk, in a child process.
        "text: compiled walk speed-up (Python walk / compiled)",
        "binary: compiled walk speed-up (Python walk / compiled)",
    ]


def test_the_sink_scaling_benchmark_measures_every_layout_and_reads_after_batches() -> None:
    report = run_benchmark(
        "sink",
        "--sizes",
        "20000,40000",
        "--batch",
        "1000",
        "--rows-per-file",
        "10000",
        "--repeat",
        "1",
        "--read-batches",
        "2",
        "--read-repeat",
        "1",
    )
    assert ratio_names(report) == [
        "plain, clustered batch: 40,000 / 20,000 rows",
        "partitioned, clustered batch: 40,000 / 20,000 rows",
        "deletion-vectors, clustered batch: 40,000 / 20,000 rows",
        "random batch at 40,000 rows: copy-on-write (plain) / deletion vectors",
        "read after 2 batches / freshly purged, Spark SQL",
        "read after 2 batches / freshly purged, delta-rs QueryBuilder",
    ]


def test_the_lag_benchmark_measures_every_transaction_into_a_partitioned_table() -> None:
    # The engine's floor applies the same stream after the daemon; it checks the table's
    # row count moved as the transactions did (a floor that matched no key fails the run).
    report = run_benchmark(
        "lag",
        "--seconds",
        "3",
        "--floor-seconds",
        "3",
        "--rate",
        "2000",
        "--table-rows",
        "20000",
        "--rows-per-file",
        "10000",
        "--key-bucket-width",
        "10000",
    )
    facts = report["facts"]
    assert isinstance(facts, dict)
    assert facts["layout"] == "partitioned by floor(id / 10,000)"
    assert str(facts["engine floor"]).startswith("3 s: ")
    figures = report["figures"]
    assert isinstance(figures, list)
    assert "engine floor: per transaction: p99 lag" in [figure["name"] for figure in figures]
    assert ratio_names(report) == [
        "p99 lag / 0.5 s",  # the target at 2k changes/s
        "daemon p99 lag / engine floor p99 lag",
    ]


def test_the_end_to_end_benchmark_checks_row_counts_of_the_daemon_and_the_split_bound() -> None:
    report = run_benchmark(
        "e2e",
        "--changes",
        "5000",
        "--table-rows",
        "20000",
        "--rows-per-file",
        "10000",
        "--key-bucket-width",
        "10000",
        "--split-bound",
    )
    # The split bound's sink half must have written every row (the benchmark checks the
    # row count of its Delta table copy and fails otherwise).
    assert ratio_names(report) == ["daemon / native apply", "split bound / native apply"]


def test_the_capture_benchmark_runs_every_contender_on_copies_of_one_slot() -> None:
    report = run_benchmark("capture", "--changes", "20000", "--repeat", "1", "--default-gc")
    assert ratio_names(report) == [
        "read loop / pg_recvlogical",
        "wal2delta capture / pg_recvlogical -f FILE",
        "daemon / pg_recvlogical",
        "daemon, default gc / pg_recvlogical",
    ]


def test_the_memory_benchmark_compares_peak_rss_of_two_transaction_sizes() -> None:
    report = run_benchmark(
        "memory", "--small-rows", "1000", "--large-rows", "20000", "--settings", "fixed-batches"
    )
    assert ratio_names(report) == ["fixed-batches: large / small peak RSS"]


def test_the_snapshot_benchmark_checks_both_copies_and_reports_both_ratios() -> None:
    report = run_benchmark("snapshot", "--rows", "20000", "--tables", "2")
    assert ratio_names(report) == [
        "one table: wal2delta / ADBC + delta-rs",
        "one table, parallelism 2: wal2delta / ADBC + delta-rs",
        "2 tables: parallelism 2 speed-up over 1",
    ]


def test_the_startup_benchmark_times_the_quick_commands_and_finds_no_heavy_import() -> None:
    report = run_benchmark("startup", "--repeat", "1", "--tables", "2")
    commands = [
        "wal2delta --version",
        "wal2delta --help",
        "wal2delta status --help",
        "wal2delta check-config -c FILE",
        "wal2delta status -c FILE",
    ]
    assert ratio_names(report) == [
        *(f"{command} / {base}" for command in commands for base in ("python -c pass", "0.3 s")),
        "wal2delta check-config -c FILE / its libraries' import",
        "wal2delta status -c FILE / its libraries' import",
    ]
    # The same check as tests/unit/daemon/test_cli_imports.py, with status reading a real
    # slot, publication and lake.
    facts = report["facts"]
    assert isinstance(facts, dict)
    assert {facts[f"heavy modules imported by {command}"] for command in commands} == {"none"}
