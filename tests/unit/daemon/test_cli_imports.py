"""What each quick command imports: ``--version``, ``--help``, ``check-config`` and
``status`` never load the engine, the sink's writers or the cut (docs/decisions/0119-*).

A structural check, not a timing: each command runs in a fresh interpreter and the test
reads ``sys.modules`` when it ends. ``python -m bench startup`` measures the times. The
lazy package roots (PEP 562) are checked here too: every public name resolves, and each
root's table of names says what its ``TYPE_CHECKING`` imports say.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

from bench.startup import HEAVY

ROOT = Path(__file__).resolve().parents[3]
LAZY_ROOTS = ("decoder", "sink", "capture", "daemon")

# Never for a quick command: the engine, delta-rs, Arrow, the cut, the daemon (the list the
# startup benchmark checks too); the sink's modules are checked against SINK_PURE below.
ENGINE = tuple(module for module in HEAVY if not module.startswith("sink."))
# The sink's pure modules: its settings and contract (``daemon.wiring`` translates the
# configuration into them), its naming (``status`` shows each table's Delta path) and the
# log listing that gives a local table's version (standard library only), and the roots of
# the subpackages they live in (docstrings only); no other sink module (the writers, the
# type mapping and Arrow, the copies' reader).
SINK_PURE = (
    "sink",
    "sink.base",
    "sink.constants",
    "sink.lake",
    "sink.lake.logversion",
    "sink.values",
    "sink.values.naming",
    "sink.settings",
)
# Nor the daemon's logging and metrics (the source monitor's): a quick command prints.
DAEMON_OUTPUTS = ("structlog", "prometheus_client", "capture.monitor", "capture.metrics")
# Nor, for --version and --help, the configuration and the source's driver.
CONFIG_AND_DRIVER = ("pydantic", "yaml", "psycopg", "config", "capture", "structlog")

PROBE = """
import sys
from pathlib import Path

try:
    from daemon.cli import main

    main(sys.argv[2:])
except BaseException:  # an unreachable source, argparse's exit: what was imported counts
    pass
finally:
    Path(sys.argv[1]).write_text("\\n".join(sorted(sys.modules)))
"""

CONFIG = """\
source:
  dsn: host=127.0.0.1 port=9 dbname=app user=app connect_timeout=1
  slot: wal2delta_probe
  publication: wal2delta_probe
  tables: [public.orders]
sink:
  path: {lake}
spool:
  dir: {spool}
"""


def _imported(tmp_path: Path, *arguments: str) -> list[str]:
    """The modules ``wal2delta ARGUMENTS`` has imported when it ends."""
    listing = tmp_path / "modules.txt"
    subprocess.run(
        [sys.executable, "-c", PROBE, str(listing), *arguments],
        cwd=ROOT,
        timeout=120,
        check=False,
        capture_output=True,
    )
    return listing.read_text().split()


def _loaded(modules: list[str], banned: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == b or m.startswith(b + ".") for b in banned)]


def _impure_sink(modules: list[str]) -> list[str]:
    return [m for m in _loaded(modules, ("sink",)) if m not in SINK_PURE]


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG.format(lake=tmp_path / "lake", spool=tmp_path / "spool"))
    return path


@pytest.mark.parametrize(
    "arguments",
    [("--version",), ("--help",), ("status", "--help"), ("check-config", "--help")],
)
def test_version_and_help_import_neither_the_engine_nor_the_configuration(
    tmp_path: Path, arguments: tuple[str, ...]
) -> None:
    modules = _imported(tmp_path, *arguments)
    assert "daemon.cli" in modules
    assert _loaded(modules, (*ENGINE, "sink", *CONFIG_AND_DRIVER)) == []


def test_check_config_loads_the_configuration_but_not_the_engine(
    tmp_path: Path, config_file: Path
) -> None:
    modules = _imported(tmp_path, "check-config", "-c", str(config_file))
    assert "config.models" in modules
    assert "daemon.source_check" in modules
    assert _loaded(modules, (*ENGINE, *DAEMON_OUTPUTS)) == []
    assert _impure_sink(modules) == []


def test_status_reaches_the_source_without_loading_the_engine(
    tmp_path: Path, config_file: Path
) -> None:
    """Nothing listens at the configured port: status stops at the connection, after its
    module and the configuration are loaded (the reads of a reachable source and lake are
    checked by the startup benchmark's smoke test)."""
    modules = _imported(tmp_path, "status", "-c", str(config_file))
    assert "daemon.status" in modules
    assert "psycopg" in modules
    assert _loaded(modules, (*ENGINE, *DAEMON_OUTPUTS)) == []
    assert _impure_sink(modules) == []


def _type_checking_imports(package: str) -> dict[str, str]:
    """Name -> ``module`` (``module:name`` when renamed) of the root's TYPE_CHECKING block."""
    tree = ast.parse((ROOT / package / "__init__.py").read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
                assert statement.module is not None
                for alias in statement.names:
                    where = statement.module
                    if alias.asname is not None:
                        where = f"{where}:{alias.name}"
                    found[alias.asname or alias.name] = where
    return found


@pytest.mark.parametrize("package", LAZY_ROOTS)
def test_a_lazy_root_names_each_public_name_where_mypy_reads_it(package: str) -> None:
    root = importlib.import_module(package)
    assert _type_checking_imports(package) == root._EXPORTS
    assert sorted(root._EXPORTS) == sorted(root.__all__)


@pytest.mark.parametrize("package", LAZY_ROOTS)
def test_every_public_name_of_a_lazy_root_resolves_to_its_modules_object(package: str) -> None:
    root = importlib.import_module(package)
    for name, where in root._EXPORTS.items():
        module, _, attribute = where.partition(":")
        value = getattr(root, name)
        assert value is getattr(importlib.import_module(module), attribute or name), name
        assert not isinstance(value, types.ModuleType), name
    assert set(root.__all__) <= set(dir(root))
    with pytest.raises(AttributeError):
        _ = root.no_such_name
