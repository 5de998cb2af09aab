"""``python -m bench resync`` (issue 32) runs end to end on a tiny workload.

A smoke run, not a measurement: the initial snapshot of a small table, then its copy
requested with ``wal2delta resync`` while a slow writer streams into another table, both
complete; the benchmark checks both Delta tables' row counts against their source tables
(it exits 1 otherwise) and reports the copy rates, their ratio and the lag percentiles. No
time or speed is asserted.
"""

from __future__ import annotations

import pytest

from tests.support.benchmarks import run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_the_resync_benchmark_copies_a_table_while_streaming_and_reports_rates_and_lag() -> None:
    report = run_benchmark(
        "resync",
        *("--rows", "20000", "--table-rows", "10000"),
        *("--rows-per-file", "5000", "--key-bucket-width", "5000"),
        *("--rate", "500", "--per-transaction", "100"),
        *("--warmup-seconds", "1", "--before-seconds", "2", "--after-seconds", "1"),
    )
    figures = {figure["name"]: figure for figure in report["figures"]}
    for name in (
        "initial snapshot",
        "online copy, request to done",
        "during the copy: per transaction: p50 lag",
        "during the copy: per transaction: p99 lag",
        "before the copy: per transaction: p99 lag",
    ):
        assert figures[name]["value"] > 0, figures[name]
    assert figures["initial snapshot"]["unit"] == "rows/s"
    ratios = {ratio["name"]: ratio for ratio in report["ratios"]}
    assert ratios["online copy / initial snapshot (rows/s)"]["target"] == 0.7
    assert ratios["p99 lag during the copy / 2 s"]["target"] == 1.0
    assert all(ratio["value"] > 0 for ratio in ratios.values()), ratios
    facts = report["facts"]
    assert facts["copied table"].startswith("public.big, 20,000 rows")
    assert "runs" in facts["during the copy: upkeep between batches"]
