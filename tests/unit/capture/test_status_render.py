"""``wal2delta status`` output: each table's location, column map and refused columns."""

from __future__ import annotations

import json
from pathlib import Path

from daemon.status import CopyStatus, Status, TableStatus, _other_delta_tables, render_status
from sink import table_path


def status(**changes: object) -> Status:
    base: dict[str, object] = {
        "slot": "w2d",
        "slot_exists": True,
        "active_pid": None,
        "wal_status": "reserved",
        "confirmed_flush_lsn": "0/10",
        "server_lsn": "0/20",
        "lag_bytes": 16,
        "retained_wal_bytes": 16,
        "publication": ["w2d"],
        "tables": [
            TableStatus(
                "Sales EU.orders",
                "Sales EU",
                "orders",
                "/lake/Sales_x0020_EU/orders",
                3,
                {"unit price": "unit_x0020_price"},
            ),
            TableStatus("public.t", "public", "t", "/lake/public/t", None, {}, ["a b"]),
        ],
        "column_names": "map",
        "other_delta_tables": [
            TableStatus("old.gone", "old", "gone", "/lake/old/gone", 7),
        ],
    }
    base.update(changes)
    return Status(**base)  # type: ignore[arg-type]


def test_the_text_shows_locations_column_maps_refused_columns_and_other_tables() -> None:
    text = render_status(status(), as_json=False)
    assert "column names      map" in text
    lines = text.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("Sales EU.orders")))
    assert lines[at].endswith("/lake/Sales_x0020_EU/orders")
    assert lines[at + 1] == "    column 'unit price' is Delta column 'unit_x0020_price'"
    assert any("column 'a b': Delta cannot hold this name" in line for line in lines)
    assert "Delta tables in the lake that no published table maps to:" in lines
    assert lines[-1].startswith("old.gone")


def test_the_json_holds_every_field() -> None:
    data = json.loads(render_status(status(), as_json=True))
    orders = data["tables"][0]
    assert (orders["schema"], orders["name"]) == ("Sales EU", "orders")
    assert orders["column_map"] == {"unit price": "unit_x0020_price"}
    assert data["tables"][1]["refused_columns"] == ["a b"]
    assert data["other_delta_tables"][0]["table"] == "old.gone"


def test_other_delta_tables_are_named_through_the_inverse_mapping(tmp_path: Path) -> None:
    root = str(tmp_path / "lake")
    for schema, table in [("public", "kept"), ("old schema", "gone täble"), ("public", "empty")]:
        path = Path(table_path(root, schema, table))
        path.mkdir(parents=True)
        if table != "empty":  # a directory without a Delta log is no table
            (path / "_delta_log").mkdir()
    (tmp_path / "lake" / "_wal2delta_messages" / "_delta_log").mkdir(parents=True)
    (tmp_path / "lake" / "foreign dir" / "x" / "_delta_log").mkdir(parents=True)
    published = {table_path(root, "public", "kept")}
    found = _other_delta_tables(root, published)
    assert found is not None
    assert [(t.schema, t.name, t.delta_path) for t in found] == [
        ("old schema", "gone täble", table_path(root, "old schema", "gone täble"))
    ]
    assert _other_delta_tables("s3://bucket/lake", published) is None
    assert _other_delta_tables(str(tmp_path / "missing"), published) == []


def test_tables_copied_while_streaming_are_listed_running_first() -> None:
    copies = [
        CopyStatus("public.b", "copying", None, "new table"),
        CopyStatus("public.a", "done", "0/5000", "resync"),
    ]
    lines = render_status(status(copies=copies), as_json=False).splitlines()
    at = lines.index(next(line for line in lines if line.startswith("table copied while")))
    assert lines[at + 1].split() == ["public.b", "copying", "-", "new", "table"]
    assert lines[at + 2].split() == ["public.a", "done", "0/5000", "resync"]
    data = json.loads(render_status(status(copies=copies), as_json=True))
    assert data["copies"][0]["state"] == "copying"
