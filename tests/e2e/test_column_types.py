"""``sink.column_types`` against a real source: ``check-config`` checks the names and the
types it can, and a table written under one choice refuses another.

The Delta column's type is the record of the representation a table was written with: a
daemon started with a different choice for a column stops before writing a row, naming
the setting, so one column never mixes two representations; back on the first choice it
goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from capture.slots import current_wal_lsn
from daemon.wiring import prepare_configured_source
from sink import SinkDataError, table_path
from tests.support.configs import make_config
from tests.support.harness import confirmed_flush, run_cli, run_daemon
from tests.support.oracle import read_delta

pytestmark = [pytest.mark.e2e]


def _config_file(tmp_path: Path, dsn: str, **sink: Any) -> Path:
    path = tmp_path / "source.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "source": {"dsn": dsn, "slot": "cc", "publication": "cc", "tables": ["public.t"]},
                "sink": {"path": str(tmp_path / "lake"), **sink},
            }
        )
    )
    return path


def test_check_config_checks_column_types_against_the_source(pg18_dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.t (id int PRIMARY KEY, valid_to timestamp, n numeric)")
    good = _config_file(
        tmp_path, pg18_dsn, column_types={"public.t": {"valid_to": "string", "n": "double"}}
    )
    ok = run_cli("check-config", str(good))
    assert ok.returncode == 0, ok.stderr
    bad = _config_file(
        tmp_path,
        pg18_dsn,
        column_types={"public.t": {"valid_too": "string", "valid_to": "double"}},
        on_unrepresentable={"public.t": "stop"},
    )
    refused = run_cli("check-config", str(bad))
    assert refused.returncode == 2
    assert "sink.column_types.public.t.valid_too: public.t has no column 'valid_too'" in (
        refused.stderr
    )
    assert "sink.column_types.public.t.valid_to: only numeric columns can be stored as double" in (
        refused.stderr
    )
    assert "timestamp without time zone" in refused.stderr
    unreachable = _config_file(
        tmp_path,
        "host=127.0.0.1 port=1 dbname=nowhere user=nobody",
        column_types={"public.t": {"valid_to": "string"}},
    )
    offline = run_cli("check-config", str(unreachable))
    assert offline.returncode == 0, offline.stderr
    assert "could not be reached (OperationalError: " in offline.stdout
    assert "not checked" in offline.stdout


def test_a_table_written_under_one_column_type_refuses_another(
    pg18_dsn: str, tmp_path: Path, spark_session: Any
) -> None:
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.t (id int PRIMARY KEY, valid_to timestamp)")
    lake = tmp_path / "lake"
    as_text = make_config(
        pg18_dsn, lake, ["public.t"], sink={"column_types": {"public.t": {"valid_to": "string"}}}
    )
    typed = make_config(pg18_dsn, lake, ["public.t"])
    prepare_configured_source(as_text)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (1, 'infinity'), (2, '2024-01-01 10:00:00')")
        first = current_wal_lsn(conn)
    run_daemon(pg18_dsn, as_text, spark_session, first)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (3, '-infinity')")
        second = current_wal_lsn(conn)
    with pytest.raises(SinkDataError) as caught:
        run_daemon(pg18_dsn, typed, spark_session, second)
    message = str(caught.value)
    assert "column 'valid_to' of public.t is STRING in Delta" in message
    assert "sink.column_types" in message
    assert confirmed_flush(pg18_dsn, typed.source.slot) < second
    run_daemon(pg18_dsn, as_text, spark_session, second)
    rows = {r["id"]: r["valid_to"] for r in read_delta(table_path(str(lake), "public", "t"))}
    assert rows == {1: "infinity", 2: "2024-01-01 10:00:00", 3: "-infinity"}
