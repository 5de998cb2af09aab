"""``python -m bench tables`` (issue 31) runs end to end on a tiny workload.

A smoke run, not a measurement: two table counts and a short lag section complete, the
benchmark checks every Delta table's row count against its source table (it exits 1
otherwise) and reports each figure and its ratio to one table. No time or speed is asserted.
"""

from __future__ import annotations

import pytest

from tests.support.benchmarks import ratio_names, run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_the_tables_benchmark_reports_every_case_against_one_table_and_the_lag() -> None:
    report = run_benchmark(
        "tables",
        "--tables",
        "1,3",
        "--changes",
        "600",
        "--transaction",
        "100",
        "--concurrency",
        "2",
        "--lag-seconds",
        "3",
        "--lag-tables",
        "3",
        "--lag-rate",
        "100",
    )
    figures = report["figures"]
    assert isinstance(figures, list)
    names = [figure["name"] for figure in figures]
    for label in ("1 table", "3 tables"):
        assert f"{label}: changes/s" in names
        assert f"{label}: peak RSS" in names
        assert f"{label}: start-up to streaming" in names
        assert f"{label}: start-up to first batch durable" in names
    assert "lag, 3 tables: per transaction: p99 lag" in names
    assert all(figure["value"] > 0 for figure in figures), figures
    facts = report["facts"]
    assert isinstance(facts, dict)
    assert facts["sink"].startswith("concurrency 2,")  # as the configuration reads it
    assert ratio_names(report) == [
        "3 / 1 table: changes/s",
        "3 / 1 table: peak RSS",
        "lag, 3 tables: p99 / 2 s",
    ]
