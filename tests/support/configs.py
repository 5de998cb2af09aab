"""Build daemon configurations for tests through the real config loader."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from config import AppConfig, parse_config


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def make_config(
    dsn: str,
    lake: Path,
    tables: Sequence[str | Mapping[str, Any]],
    *,
    slot: str = "wal2delta_test",
    **overrides: Any,
) -> AppConfig:
    """A configuration for ``dsn`` writing to ``lake``; ``overrides`` merge per section."""
    data: dict[str, Any] = {
        "source": {
            "dsn": dsn,
            "slot": slot,
            "publication": slot,
            "tables": list(tables),
            "status_interval": "1s",
        },
        "sink": {
            "path": str(lake),
            "batch": {"max_rows": 2000, "max_age": "200ms"},
        },
        "spool": {"dir": str(lake.parent / "spool"), "memory_limit": "1MiB"},
        "metrics": {"enabled": False},
        "logging": {"format": "console", "level": "warning"},
    }
    return parse_config(_merge(data, overrides))
