"""Generated columns on every version: copied by the snapshot exactly when streamed.

PostgreSQL 14 to 17 never publish a generated column (and 14 has no column lists in
``pg_publication_tables``); 18 publishes a stored one when the publication says
``publish_generated_columns = stored``. The initial snapshot must copy the columns the
stream will send - no more, no fewer - or the Delta table would hold a column that streamed
rows leave empty. Each case copies a table, then streams inserts and updates of it, and
every row the sink received (copied and streamed) has the same columns, with the source's
values.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from capture.slots import current_wal_lsn
from daemon.supervisor import Supervisor
from tests.support.configs import make_config
from tests.support.model_sink import ModelSink
from tests.support.oracle import canonical

pytestmark = pytest.mark.integration

SCHEMA = """
CREATE TABLE public.items (id int PRIMARY KEY, v int NOT NULL,
                           doubled int GENERATED ALWAYS AS (v * 2) STORED);
INSERT INTO public.items (id, v) SELECT g, g FROM generate_series(1, 50) g;
"""
WORKLOAD = [
    "INSERT INTO public.items (id, v) SELECT g, g FROM generate_series(51, 80) g",
    "UPDATE public.items SET v = v + 1000 WHERE id % 3 = 0",
    "DELETE FROM public.items WHERE id % 10 = 0",
]


@pytest.mark.parametrize(
    ("server", "publish_generated", "columns"),
    [
        ("pg14", False, ["id", "v"]),
        ("pg15", False, ["id", "v"]),
        ("pg16", False, ["id", "v"]),
        ("pg17", False, ["id", "v"]),
        ("pg18", False, ["id", "v"]),
        ("pg18", True, ["id", "v", "doubled"]),
    ],
)
def test_the_snapshot_copies_the_columns_the_stream_sends(
    server: str,
    publish_generated: bool,
    columns: list[str],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    option = " WITH (publish_generated_columns = stored)" if publish_generated else ""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(f"CREATE PUBLICATION w2d_generated FOR TABLE public.items{option}")
    config = make_config(
        dsn,
        tmp_path / "lake",
        [],
        slot="w2d_generated",
        source={"publication": "w2d_generated", "create_publication": False},
        snapshot={"mode": "initial"},
    )
    sink = ModelSink()
    with psycopg.connect(dsn, autocommit=True) as conn:
        copied_until = current_wal_lsn(conn)
    Supervisor(config, sink, endpos=copied_until).run()
    copied = dict(sink.tables["public.items"])
    assert len(copied) == 50
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in WORKLOAD:
            conn.execute(statement.encode())
        endpos = current_wal_lsn(conn)
    Supervisor(config, sink, endpos=endpos).run()
    streamed = [row for row in sink.tables["public.items"].values() if int(str(row["id"])) > 50]
    assert streamed, "rows arrived by the stream"
    for row in [*copied.values(), *streamed]:
        assert sorted(row) == sorted(columns), row
    with psycopg.connect(dsn, autocommit=True) as conn:
        source = conn.execute(f"SELECT {', '.join(columns)} FROM public.items").fetchall()
    expected = sorted([canonical(v) for v in row] for row in source)
    got = sorted(
        [canonical(row[c]) for c in columns] for row in sink.tables["public.items"].values()
    )
    assert got == expected
