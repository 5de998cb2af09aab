"""The configuration's JSON Schema, generated from the models, for editors.

Run ``python -m config.schema docs/wal2delta.schema.json`` after changing a model; a unit
test fails when the committed file differs from what this module renders. Point an editor
at it (``# yaml-language-server: $schema=...`` in the YAML file, or the editor's schema
mapping) to get validation and completion while writing a configuration. Values written
as ``${VAR}`` are checked only after interpolation, by wal2delta itself.
"""

from __future__ import annotations

import json
import sys

from config.docs import emit
from config.models import AppConfig

SCHEMA_ID = "https://wal2delta.dev/schemas/config.json"


def render() -> str:
    """The JSON Schema of one configuration file, as committed text."""
    schema = AppConfig.model_json_schema(mode="validation")
    # ``public.orders`` is shorthand for ``{name: public.orders}`` (``TableEntry``).
    tables = schema["$defs"]["SourceConfig"]["properties"]["tables"]
    tables["items"] = {"anyOf": [{"type": "string"}, tables["items"]]}
    document = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "wal2delta configuration (one file per source database)",
        **schema,
    }
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    return emit(render(), argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
