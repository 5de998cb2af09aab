"""The generated reference is current and every example configuration parses."""

import re
from pathlib import Path

import pytest
import yaml

from config import AppConfig, parse_config
from config.docs import EXAMPLE, render

ROOT = Path(__file__).resolve().parents[3]
# Variables the shipped examples reference; a test environment, not real secrets.
EXAMPLE_ENV = {"PGPASSWORD": "example", "PGHOST": "db", "WAL2DELTA_LAKE": "/lake"}
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_configuration_reference_is_up_to_date() -> None:
    """Regenerate with: python -m config.docs docs/configuration.md"""
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == render(), "docs/configuration.md is stale: run python -m config.docs"


def test_reference_documents_every_field() -> None:
    text = render()

    def paths(model: type, prefix: str) -> list[str]:
        found = []
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            path = f"{prefix}{name}"
            found.append(path)
            nested = [
                arg
                for arg in (field.annotation, *getattr(field.annotation, "__args__", ()))
                if isinstance(arg, type) and hasattr(arg, "model_fields")
            ]
            if nested:
                found.extend(paths(nested[0], path + "."))
        return found

    for path in paths(AppConfig, ""):
        assert f"`{path}`" in text or f"`{path.replace('tables.', 'tables[].')}`" in text, path


def test_every_field_has_a_description() -> None:
    def models(model: type) -> list[type]:
        found = [model]
        for field in model.model_fields.values():  # type: ignore[attr-defined]
            for arg in (field.annotation, *getattr(field.annotation, "__args__", ())):
                for inner in (arg, *getattr(arg, "__args__", ())):
                    if isinstance(inner, type) and hasattr(inner, "model_fields"):
                        found.extend(models(inner))
        return found

    for model in models(AppConfig):
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            assert field.description, f"{model.__name__}.{name} has no description"


def test_the_example_in_the_reference_parses() -> None:
    config = parse_config(yaml.safe_load(EXAMPLE), environ=EXAMPLE_ENV)
    assert config.source.tables[1].key == ("id",)


def docs_examples() -> list[tuple[str, str]]:
    examples = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        for index, match in enumerate(YAML_BLOCK.finditer(path.read_text(encoding="utf-8"))):
            block = match.group(1)
            if re.search(r"^source:", block, re.MULTILINE):
                examples.append((f"{path.name}#{index}", block))
    return examples


@pytest.mark.parametrize(("where", "block"), docs_examples())
def test_configuration_examples_in_the_docs_parse(where: str, block: str) -> None:
    assert isinstance(parse_config(yaml.safe_load(block), environ=EXAMPLE_ENV), AppConfig), where


def test_docs_contain_configuration_examples() -> None:
    assert len(docs_examples()) >= 1
