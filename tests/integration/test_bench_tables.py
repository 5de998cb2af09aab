"""``python -m bench tables`` (issues 31 and 40) runs end to end on a tiny workload.

A smoke run, not a measurement: both default mixes over two table counts, the engine's
floor, a small "big" table and a short lag section complete; the benchmark checks every
Delta table's row count against its source table (it exits 1 otherwise) and reports each
figure, its ratio to one table and the daemon's cost per table write against the floor.
No time or speed is asserted.
"""

from __future__ import annotations

import pytest

from bench.table_workload import MIXES
from tests.support.benchmarks import ratio_names, run_benchmark

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_the_tables_benchmark_reports_every_case_against_one_table_the_floor_and_the_lag() -> None:
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
        "--big-rows",
        "2000",
        "--big-batch",
        "100",
        "--big-repeat",
        "1",
        "--big-rows-per-file",
        "1000",
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
    for mix in ("insert-only", "70-30"):
        for label in (f"{mix}, 1 table", f"{mix}, 3 tables"):
            assert f"{label}: changes/s" in names
            assert f"{label}: peak RSS" in names
            assert f"{label}: start-up to streaming" in names
            assert f"{label}: start-up to first batch durable" in names
            assert f"{label}: daemon, per table write" in names
            for floor in ("merge, serial", "merge, concurrent", "append, serial"):
                assert f"{label}: engine floor, {floor}" in names
        # The phases of the sink, timed in the daemon's process, for the largest case.
        assert f"{mix}, 3 tables: daemon phase: table: all of it" in names
    assert "big: 100-insert batch into 2,000 rows" in names
    assert "lag, 3 tables, insert-only: per transaction: p99 lag" in names
    assert all(figure["value"] > 0 for figure in figures if "phase" not in figure["name"])
    facts = report["facts"]
    assert isinstance(facts, dict)
    assert facts["sink"].startswith("concurrency 2,")  # as the configuration reads it
    ratios = ratio_names(report)
    for mix in ("insert-only", "70-30"):
        for label in (f"{mix}, 1 table", f"{mix}, 3 tables"):
            assert f"{label}: daemon per table write / engine merge, concurrent" in ratios
            assert f"{label}: daemon per table write / engine append, concurrent" in ratios
        assert f"{mix}: 3 / 1 table: changes/s" in ratios
        assert f"{mix}: 3 / 1 table: peak RSS" in ratios
    assert ratios[-2:] == ["big: 2,000 rows / empty table", "lag, 3 tables, insert-only: p99 / 5 s"]


def test_every_mix_splits_a_transaction_of_the_benchmark_exactly() -> None:
    assert MIXES["insert-only"].sizes(100) == (100, 0, 0)
    assert MIXES["70-30"].sizes(100) == (70, 30, 0)
    assert MIXES["60-30-10"].sizes(100) == (60, 30, 10)
    with pytest.raises(ValueError, match="do not split"):
        MIXES["70-30"].sizes(15)
