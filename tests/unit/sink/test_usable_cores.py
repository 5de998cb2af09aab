"""The embedded engine's default parallelism: the usable cores less one, at least 1
(``sink.spark.embedded_parallelism``); the engine side is
``tests/integration/test_engine_parallelism.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from sink.engine import spark
from sink.engine.spark import embedded_parallelism, usable_cores


@pytest.mark.parametrize(("cores", "expected"), [(1, 1), (2, 1), (3, 2), (16, 15)])
def test_the_daemon_keeps_one_core_for_itself(cores: int, expected: int) -> None:
    assert embedded_parallelism(cores) == expected


@pytest.mark.parametrize(
    ("cpu_max", "limit"),
    [("200000 100000", 2), ("150000 100000", 2), ("50000 100000", 1), ("max 100000", None)],
)
def test_a_cgroup_cpu_quota_caps_the_usable_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_max: str, limit: int | None
) -> None:
    quota = tmp_path / "cpu.max"
    quota.write_text(cpu_max + "\n")
    monkeypatch.setattr(spark, "_CGROUP_CPU_MAX", tmp_path / "absent")
    unlimited = usable_cores()
    monkeypatch.setattr(spark, "_CGROUP_CPU_MAX", quota)
    assert usable_cores() == (unlimited if limit is None else min(unlimited, limit))


def test_an_unreadable_quota_leaves_the_affinity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    garbled = tmp_path / "cpu.max"
    garbled.write_text("not a quota\n")
    monkeypatch.setattr(spark, "_CGROUP_CPU_MAX", tmp_path / "absent")
    unlimited = usable_cores()
    monkeypatch.setattr(spark, "_CGROUP_CPU_MAX", garbled)
    assert usable_cores() == unlimited >= 1
