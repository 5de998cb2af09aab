"""The tests' oracle (``tests/support/oracle.py``) is independent of the product, and its
canonical form is the documented one (docs/operations.md, "How it compares")."""

from __future__ import annotations

import ast
import datetime as dt
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import pytest

from tests.support.oracle import canonical

ROOT = Path(__file__).resolve().parents[2]
ORACLE = ROOT / "tests" / "support" / "oracle.py"
PRODUCT = ("decoder", "sink", "capture", "daemon", "devtools", "config")
# The type mapping's published names, which say how a column is held in Delta (and under
# which name): the only product code the oracle may use.
MAPPING = {"ColumnNamePolicy", "ValueForm", "column_map", "delta_type"}


def test_the_oracle_uses_nothing_of_the_product_but_the_type_mapping() -> None:
    used: list[str] = []
    for node in ast.walk(ast.parse(ORACLE.read_text())):
        if isinstance(node, ast.Import):
            used += [a.name for a in node.names if a.name.split(".")[0] in PRODUCT]
        elif isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top == "tests":
                used.append(node.module)
            elif top in PRODUCT:
                used += [f"{node.module}.{a.name}" for a in node.names if a.name not in MAPPING]
                used += [node.module] if node.module != "sink" else []
    assert not used, f"the oracle must not use {used}"


def test_numbers_compare_exactly_with_their_scale() -> None:
    assert canonical(Decimal("1.50")) != canonical(Decimal("1.5"))
    assert canonical(Decimal("1.50")) != canonical(1.5)
    assert canonical(1) != canonical(1.0)
    assert canonical(True) != canonical(1)
    assert canonical(-0.0) != canonical(0.0)
    assert canonical(float("nan")) == canonical(float("nan"))
    assert canonical(float("inf")) != canonical(float("-inf"))


def test_instants_compare_in_utc_and_differ_from_wall_clock_times() -> None:
    pacific = dt.timezone(dt.timedelta(hours=-8))
    instant = dt.datetime(2024, 3, 10, 1, 30, tzinfo=pacific)
    assert canonical(instant) == canonical(instant.astimezone(dt.UTC))
    assert canonical(instant.replace(tzinfo=None)) != canonical(instant)
    assert canonical(dt.date(2024, 3, 10)) != canonical(dt.datetime(2024, 3, 10))


def test_text_bytes_uuids_and_arrays() -> None:
    uuid = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert canonical(UUID(uuid)) == canonical(uuid)
    assert canonical(memoryview(b"\x00")) == canonical(b"\x00")
    assert canonical(b"a") != canonical("a")
    assert canonical([1, None]) == canonical((1, None))
    assert canonical([Decimal("1.50")]) != canonical([Decimal("1.5")])
    assert canonical(None) is None


def test_the_texts_are_the_documented_ones() -> None:
    assert canonical(Decimal("0.0000001")) == "numeric:0.0000001"
    assert canonical(dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)) == "instant:1000000"
    assert canonical(dt.datetime(2024, 1, 1)) == "timestamp:2024-01-01 00:00:00.000000"
    assert canonical(0.5) == "float:0x1.0000000000000p-1"
    assert canonical(b"\x00\xff") == "bytea:00ff"
    assert canonical(["a", None]) == "array:[6:text:a,N]"


@pytest.mark.parametrize("value", [dt.timedelta(days=1), {"a": 1}, dt.time(12), object()])
def test_a_value_without_a_form_is_refused_rather_than_guessed(value: object) -> None:
    with pytest.raises(TypeError, match="read the column as its PostgreSQL text"):
        canonical(value)
