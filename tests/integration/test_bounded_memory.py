"""Peak memory of the capture + decode stage does not grow with transaction size.

A 2-million-row transaction and a 20-thousand-row one are streamed through the daemon
against a 1 MiB spill limit, each in its own process; their peak RSS must be within 1.2x
(docs/architecture.md, invariant 6), and its batches must stay near ``max_rows``, the sink
worker keeping pace with the replay. Wall time is not asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.harness import child_environment

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _probe(dsn: str, rows: int, workdir: Path) -> dict[str, int]:
    workdir.mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.memory_probe", dsn, str(rows), str(workdir)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=ROOT,
        env=child_environment(),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    measured: dict[str, int] = json.loads(result.stdout.strip().splitlines()[-1])
    return measured


def test_peak_rss_of_a_two_million_row_transaction_stays_near_a_small_one(
    pg18_dsn: str, tmp_path: Path
) -> None:
    small = _probe(pg18_dsn, 20_000, tmp_path / "small")
    large = _probe(pg18_dsn, 2_000_000, tmp_path / "large")
    assert small["rows"] == 20_000
    assert large["rows"] == 2_000_000
    ratio = large["peak_rss_kib"] / small["peak_rss_kib"]
    assert ratio <= 1.2, f"peak RSS grew {ratio:.2f}x: {small} vs {large}"
    # The counting sink keeps pace, so batches stay at max_rows (5000). A sink worker that
    # cannot start while the loop replays the spilled transaction lets the next batch grow
    # towards max_bytes (about 90k changes here), and two of them are alive.
    assert large["largest_batch"] <= 5 * 5000, f"the sink worker fell behind: {large}"
