"""Running a benchmark as a smoke test: ``python -m bench NAME ARGS --json`` and its report."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.harness import ROOT, child_environment


def run_benchmark(name: str, *args: str) -> dict[str, object]:
    """Run ``python -m bench NAME ARGS --json`` and return its JSON report."""
    done = subprocess.run(
        [sys.executable, "-m", "bench", name, *args, "--json"],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
        cwd=ROOT,
        env=child_environment(),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def ratio_names(report: dict[str, object]) -> list[str]:
    ratios = report["ratios"]
    assert isinstance(ratios, list)
    for ratio in ratios:
        assert ratio["value"] > 0, ratio
    return [str(ratio["name"]) for ratio in ratios]
