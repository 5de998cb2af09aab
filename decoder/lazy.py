"""Package roots that import their modules on first use (PEP 562).

``decoder``, ``sink``, ``capture`` and ``daemon`` re-export their public names from the
modules that define them, but a command such as ``wal2delta --version`` must not import
the engine, delta-rs or Arrow to print a line (docs/decisions/0119-the-quick-commands-
import-only-what-they-use.md). Each root keeps a table of its names and their modules and
hands it to ``lazy_exports``, which makes the root's ``__getattr__`` and ``__dir__``: a
name's module is imported the first time the name is read, and the value is cached in the
root's namespace so later reads are plain lookups. Type checkers see the roots' ordinary
imports under ``TYPE_CHECKING`` instead.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping


def lazy_exports(
    package: str, exports: Mapping[str, str], names: Iterable[str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package root that loads names on first use.

    Args:
        package: the root's ``__name__`` (the module being initialised).
        exports: each public name and the module defining it, ``module:name`` when the
            module calls it otherwise.
        names: the root's ``__all__``.

    Returns:
        ``(__getattr__, __dir__)`` to bind in the root's namespace.
    """
    namespace = sys.modules[package].__dict__
    public = frozenset(names)

    def load(name: str) -> object:
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = where.partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        namespace[name] = value
        return value

    def listing() -> list[str]:
        return sorted(set(namespace) | public)

    return load, listing
