"""The dependency rule between packages (ARCHITECTURE.md, STYLE.md section 3.1).

``decoder`` imports none of ours; ``sink`` only ``decoder``; ``config`` none; ``capture``
anything. Across packages only the package root is imported (``from decoder import X``),
so each package's ``__all__`` is its whole public surface.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("capture", "decoder", "sink", "config")
ALLOWED = {
    "decoder": set(),
    "sink": {"decoder"},
    "config": set(),
    "capture": {"decoder", "sink", "config"},
}
# Modules a layer may not import (what it must never touch). The sink may use psycopg's
# pure type machinery (``psycopg.types``, ``psycopg.adapt``) but never a connection.
FORBIDDEN_MODULES = {
    "decoder": ("socket", "pyspark", "yaml", "structlog", "logging", "prometheus_client"),
    "sink": ("psycopg.connection", "psycopg.cursor"),
    "config": ("pyspark", "structlog"),
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
