"""The README's first command, ``wal2delta demo``, run as a newcomer runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_the_demo_replicates_its_workload_and_prints_no_engine_log_lines(tmp_path: Path) -> None:
    entrypoint = shutil.which("wal2delta")
    assert entrypoint is not None, "the package's console script is not installed"
    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
    done = subprocess.run(
        [entrypoint, "demo", "--rounds", "3", "--dir", "work", "--lake", "lake"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    # The demo ends by checking every table against PostgreSQL and says what it found.
    assert "MISMATCH" not in output
    assert any(line.startswith("shop.") for line in output.splitlines()), output
    # Sail's own logger stays quiet: it would print "[<time> INFO sail_...]" lines.
    assert "sail_" not in output, output
    assert (tmp_path / "lake" / "shop").is_dir()
