"""The built wheel works on its own: a clean virtual environment runs the entry point.

The container image installs exactly this wheel (see the Dockerfile); no Docker engine
runs here, so the test builds the wheel, installs it without the source tree into a fresh
venv (dependencies reused from this environment through a path entry, not re-downloaded)
and runs the console script the image uses as its entrypoint.
"""

from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_installed_in_a_clean_venv_runs_the_entrypoint(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("wal2delta-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    dependencies = [p for p in site.getsitepackages() if p != sysconfig.get_paths()["purelib"]]
    dependencies.append(sysconfig.get_paths()["purelib"])
    # Only the dependencies: the editable install's import hook (a .pth in this site
    # directory) is not run for a directory added this way, so our packages come from the
    # wheel alone.
    (Path(purelib) / "_dependencies.pth").write_text("\n".join(dependencies) + "\n")

    entrypoint = venv / "bin" / "wal2delta"
    help_text = subprocess.run(
        [str(entrypoint), "--help"], check=True, capture_output=True, text=True, cwd=tmp_path
    ).stdout
    for command in ("run", "check-config", "status", "capture", "decode", "demo"):
        assert command in help_text
    origin, kernel, sink_kernel = subprocess.run(
        [
            str(python),
            "-c",
            "import capture, sink, decoder, config, sink.planning.kernel; "
            "print(capture.__file__, decoder.DECODER_KERNEL, sink.planning.kernel.KERNEL)",
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout.split()
    assert origin.startswith(purelib), origin
    # The wheel carries both C kernels, built with it (decoder/native.py, sink/planning/kernel.py).
    assert (kernel, sink_kernel) == ("compiled", "compiled")
    assert list(Path(purelib, "decoder").glob("_tuplewalk*.so"))
    assert list(Path(purelib, "sink", "planning").glob("_columnar*.so"))

    config = tmp_path / "config.yaml"
    config.write_text(
        "source: {dsn: 'host=db dbname=app user=r', slot: s1, publication: p1,"
        " tables: [public.t]}\n"
        "sink: {path: /tmp/lake}\n"
    )
    checked = subprocess.run(
        [str(entrypoint), "check-config", str(config)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    config.write_text("source: {dsn: 1, slot: s1}\nsink: {path: /tmp/lake, batch: {max_rows: x}}\n")
    bad = subprocess.run(
        [str(entrypoint), "check-config", str(config)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert bad.returncode == 2
    assert "source.publication" in bad.stderr
    assert "sink.batch.max_rows" in bad.stderr
