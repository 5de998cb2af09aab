"""The published JSON Schema is current, and editors using it accept what wal2delta accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from config.docs import EXAMPLE
from config.schema import render

ROOT = Path(__file__).resolve().parents[3]
SCHEMA_FILE = ROOT / "docs" / "wal2delta.schema.json"
SHIPPED_CONFIGS = sorted((ROOT / "deploy").rglob("config.yaml"))


def _validator() -> jsonschema.Draft202012Validator:
    schema = yaml.safe_load(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(document: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in _validator().iter_errors(document)]


def test_the_committed_schema_is_current() -> None:
    """Regenerate with: python -m config.schema docs/wal2delta.schema.json"""
    assert SCHEMA_FILE.read_text(encoding="utf-8") == render(), "stale: run python -m config.schema"


def test_the_reference_example_validates() -> None:
    assert _errors(yaml.safe_load(EXAMPLE)) == []


@pytest.mark.parametrize("path", SHIPPED_CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_shipped_configurations_validate(path: Path) -> None:
    assert _errors(yaml.safe_load(path.read_text(encoding="utf-8"))) == []


def test_shorthands_units_and_lists_validate_and_mistakes_do_not() -> None:
    good = {
        "source": {
            "dsn": "host=db dbname=app",
            "slot": "s",
            "publication": ["a", "b"],
            "tables": ["public.t", {"name": "public.u", "key": ["id"]}],
        },
        "sink": {"path": "s3://lake/app", "batch": {"max_age": "1h30m", "max_bytes": "64MiB"}},
        "spool": {"memory_limit": 1048576},
    }
    assert _errors(good) == []
    bad = {
        "source": {"dsn": "host=db", "slot": "s", "publication": [], "tables": [7]},
        "sink": {"path": "/lake", "batch": {"max_age": "soon", "max_rows": "many"}},
        "extra": True,
    }
    found = " ".join(_errors(bad))
    for where in ("publication", "tables", "max_age", "max_rows", "extra"):
        assert where in found, (where, found)
