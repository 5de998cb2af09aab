"""What the config package may depend on, and what its dumps can be used for."""

import ast
import json
from pathlib import Path

from config import parse_config

CONFIG_PACKAGE = Path(__file__).resolve().parents[3] / "config"
OUR_PACKAGES = {"capture", "decoder", "sink"}


def test_config_imports_nothing_else_of_ours() -> None:
    for path in CONFIG_PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in OUR_PACKAGES, f"{path.name} imports {name}"


def test_json_dump_without_secrets_parses_back_to_the_same_config() -> None:
    """Durations dump as "10s" and sizes as bytes, so a dump is a valid configuration."""
    data = {
        "source": {
            "dsn": "host=db dbname=app",
            "slot": "s",
            "publication": "p",
            "tables": ["a", {"name": "b", "key": ["id"]}],
            "heartbeat": {"interval": "90s", "statement": "SELECT 1"},
        },
        "sink": {"path": "/lake", "batch": {"max_age": "250ms"}},
        "spool": {"memory_limit": "1GiB"},
    }
    config = parse_config(data, environ={})
    dumped = json.loads(config.model_dump_json())
    assert dumped["source"]["heartbeat"]["interval"] == "1m30s"
    assert dumped["sink"]["batch"]["max_age"] == "250ms"
    assert parse_config(dumped, environ={}) == config
