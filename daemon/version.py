"""The installed wal2delta version: for ``wal2delta --version`` and the build-info metric.

A module of its own so that ``--version`` reads it without importing the supervisor (and
the capture and sink layers behind it); see docs/decisions/0119-*.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    """The installed wal2delta version (``0+unknown`` when run from a bare checkout)."""
    try:
        return version("wal2delta")
    except PackageNotFoundError:
        return "0+unknown"
