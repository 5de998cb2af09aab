"""Start-up of the commands an operator runs during an incident (issue 38, part G).

``wal2delta --version``, ``--help``, ``status --help``, ``check-config -c FILE`` and
``status -c FILE`` run as separate processes, each ``--repeat`` times, and the median wall
time of the whole process is the figure - interpreter start, imports, the command's work
and exit. Two baselines are measured in the same run with the same interpreter: ``python
-c pass`` (what no command can go below) and ``python -c "import psycopg, pydantic,
yaml"``, the libraries ``check-config`` and ``status`` cannot do without (the DSN is
validated by libpq, the configuration by pydantic, the file read by PyYAML). Each command
is given as a ratio to ``python -c pass`` and to the 0.3 s target.

``status`` runs against a throw-away PostgreSQL (``bench.postgres``) with ``--tables``
published tables and a slot, over a local lake in which each table is a Delta table with
a few versions (written with delta-rs), so that it reads the slot, the publication, every
table's columns and every Delta version - as it does for an operator.

The children read compiled bytecode, as the image's interpreter does (the Dockerfile
compiles the installed packages): ``PYTHONDONTWRITEBYTECODE`` is dropped and
``PYTHONPYCACHEPREFIX`` points to a fresh directory that one untimed run of each command
fills. ``--source-bytecode`` keeps the inherited environment instead (a checkout run with
``PYTHONDONTWRITEBYTECODE=1`` compiles every module of ours at every start).

Each command also runs once under ``-X importtime``; the facts list the heavy modules
(the engine, delta-rs, Arrow, the sink's writers, the cut) each one imported, which must
be none (``tests/unit/daemon/test_cli_imports.py`` pins the same without a server).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import psycopg
import pyarrow as pa
from deltalake import write_deltalake

from bench.postgres import bench_server
from bench.report import Figure, Ratio, median_figure, print_report
from sink import table_path

ROOT: Final = Path(__file__).resolve().parents[1]
TARGET_SECONDS: Final = 0.3
HEAVY: Final = (
    "pyspark",
    "pysail",
    "grpc",
    "deltalake",
    "pyarrow",
    "numpy",
    "daemon.cut",
    "daemon.process",
    "daemon.supervisor",
    "capture.session",
    "sink.delta",
    "sink.copies.copies",
    "sink.values.typemap",
)
"""Modules no quick command may import (``tests/unit/daemon/test_cli_imports.py``)."""

CONFIG: Final = """\
source:
  dsn: "{dsn}"
  slot: bench_startup
  publication: bench_startup
  tables: [{tables}]
sink:
  path: {lake}
spool:
  dir: {spool}
metrics:
  enabled: false
"""


def _wal2delta() -> list[str]:
    """The ``wal2delta`` console script beside the interpreter, as an operator runs it;
    ``python -m daemon.cli`` when it is not installed there."""
    script = Path(sys.executable).parent / "wal2delta"
    return [str(script)] if script.exists() else [sys.executable, "-m", "daemon.cli"]


def _environment(pycache: Path | None) -> dict[str, str]:
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    if pycache is not None:
        environment.pop("PYTHONDONTWRITEBYTECODE", None)
        environment["PYTHONPYCACHEPREFIX"] = str(pycache)
    return environment


def _run(command: Sequence[str], environment: Mapping[str, str]) -> float:
    """Wall time of one run of ``command``; raises when it fails."""
    started = time.perf_counter()
    done = subprocess.run(
        command, env=environment, cwd=ROOT, capture_output=True, check=False, timeout=120
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} exited {done.returncode}: {done.stderr.decode()[-2000:]}"
        )
    return elapsed


def _heavy_imports(command: Sequence[str], environment: Mapping[str, str]) -> list[str]:
    """Which of ``HEAVY`` ``command`` imports (``-X importtime`` lists every module imported,
    one a line, on stderr)."""
    program = command[1:] if command[0] == sys.executable else command
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *program],
        env=environment,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    modules = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    return sorted(
        {heavy for heavy in HEAVY for m in modules if m == heavy or m.startswith(heavy + ".")}
    )


def _prepare_source(dsn: str, tables: int, lake: Path) -> list[str]:
    """``tables`` published tables and the slot on the server, and each table's Delta
    table with three versions in ``lake``; the tables' ``schema.name``."""
    names = [f"public.startup_{number}" for number in range(tables)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(f"CREATE TABLE {name} (id bigint PRIMARY KEY, label text)")
        conn.execute(f"CREATE PUBLICATION bench_startup FOR TABLE {', '.join(names)}")
        conn.execute("SELECT pg_create_logical_replication_slot('bench_startup', 'pgoutput')")
    for name in names:
        schema, table = name.split(".")
        path = table_path(str(lake), schema, table)
        for version in range(3):
            rows = pa.table({"id": [version], "label": [f"row {version}"]})
            write_deltalake(path, rows, mode="append")
    return names


def measure(
    repeat: int, tables: int, workdir: Path, *, compiled: bool
) -> tuple[list[Figure], list[Ratio], dict[str, object]]:
    """Every command and both baselines, ``repeat`` times each, interleaved."""
    pycache = workdir / "pycache" if compiled else None
    environment = _environment(pycache)
    python = [sys.executable]
    config = workdir / "config.yaml"
    with bench_server(workdir / "pg") as server:
        dsn = server.dsn()
        names = _prepare_source(dsn, tables, workdir / "lake")
        config.write_text(
            CONFIG.format(
                dsn=dsn,
                tables=", ".join(names),
                lake=workdir / "lake",
                spool=workdir / "spool",
            )
        )
        wal2delta = _wal2delta()
        contenders = {
            "python -c pass": [*python, "-c", "pass"],
            "python -c 'import psycopg, pydantic, yaml'": [
                *python,
                "-c",
                "import psycopg, pydantic, yaml",
            ],
            "wal2delta --version": [*wal2delta, "--version"],
            "wal2delta --help": [*wal2delta, "--help"],
            "wal2delta status --help": [*wal2delta, "status", "--help"],
            "wal2delta check-config -c FILE": [*wal2delta, "check-config", "-c", str(config)],
            "wal2delta status -c FILE": [*wal2delta, "status", "-c", str(config)],
        }
        runs: dict[str, list[float]] = {name: [] for name in contenders}
        for command in contenders.values():
            _run(command, environment)  # Fills the bytecode cache; not timed.
        for _ in range(repeat):
            # Interleaved, so that a burst of load elsewhere spreads over every command.
            for name, command in contenders.items():
                runs[name].append(_run(command, environment) * 1000)
        heavy = {
            name: _heavy_imports(command, environment) or "none"
            for name, command in contenders.items()
            if name.startswith("wal2delta")
        }
    figures = [median_figure(name, values, "ms") for name, values in runs.items()]
    by_name = {figure.name: figure for figure in figures}
    baseline = by_name["python -c pass"]
    floor = by_name["python -c 'import psycopg, pydantic, yaml'"]
    ratios: list[Ratio] = []
    for figure in figures:
        if not figure.name.startswith("wal2delta"):
            continue
        ratios.append(Ratio(f"{figure.name} / python -c pass", figure.value / baseline.value))
        ratios.append(
            Ratio(
                f"{figure.name} / {TARGET_SECONDS} s",
                figure.value / (TARGET_SECONDS * 1000),
                target=1.0,
                higher_is_better=False,
            )
        )
    for name in ("wal2delta check-config -c FILE", "wal2delta status -c FILE"):
        ratios.append(Ratio(f"{name} / its libraries' import", by_name[name].value / floor.value))
    facts: dict[str, object] = {
        "runs per command": repeat,
        "published tables (status)": tables,
        "bytecode": "compiled once into a fresh PYTHONPYCACHEPREFIX"
        if compiled
        else "as inherited",
        "command": " ".join(_wal2delta()),
        **{f"heavy modules imported by {name}": value for name, value in heavy.items()},
    }
    return figures, ratios, facts


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when it measured."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--repeat", type=int, default=9, help="timed runs per command")
    parser.add_argument("--tables", type=int, default=20, help="published tables for status")
    parser.add_argument(
        "--source-bytecode",
        action="store_true",
        help="keep the inherited environment (PYTHONDONTWRITEBYTECODE=1 compiles at each start)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON line at the end")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="w2d-bench-startup-") as workdir:
        try:
            figures, ratios, facts = measure(
                args.repeat, args.tables, Path(workdir), compiled=not args.source_bytecode
            )
        except RuntimeError as exc:
            print(f"cannot measure: {exc}", file=sys.stderr)
            return 1
    print_report(
        "start-up of the quick commands (issue 38, part G)",
        figures,
        ratios,
        facts=facts,
        as_json=args.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
