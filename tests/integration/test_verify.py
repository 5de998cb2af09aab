"""``devtools.verify.compare_table``: the check the demo and the end-to-end tests rely on."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from devtools.verify import compare_table

pytestmark = pytest.mark.integration


def test_a_key_held_by_two_delta_rows_is_a_mismatch(pg18_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.pairs (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO pairs VALUES (1, 'a'), (2, 'b')")
        rows = {"id": pa.array([1, 2], pa.int32()), "v": pa.array(["a", "b"])}
        write_deltalake(str(tmp_path / "same"), pa.table(rows))
        same = compare_table(conn, "public.pairs", tmp_path / "same")
        assert same.matches, same.describe()

        doubled = {"id": pa.array([1, 2, 2], pa.int32()), "v": pa.array(["a", "b", "b"])}
        write_deltalake(str(tmp_path / "doubled"), pa.table(doubled))
        comparison = compare_table(conn, "public.pairs", tmp_path / "doubled")
    assert not comparison.matches
    assert comparison.duplicated == [("2",)]
    assert "several delta rows: key ('2',)" in comparison.describe()
