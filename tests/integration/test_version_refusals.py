"""What a server version cannot do stops start-up with exit 2, naming the version and setting.

Each PostgreSQL major version gains replication features: 15 two-phase decoding
(protocol 3), row filters and column lists; 16 parallel streaming (protocol 4) and
``origin``; 17 failover slots. Asking an older server for one of them must not be a silent
downgrade nor a server error in the middle of streaming: start-up refuses it with a
``ServerCapabilityError`` (exit code 2) whose message names the configuration setting and
the server's major version, before a slot or a publication is created. The same requests
succeed on the versions that have the feature (tests/e2e/test_protocol_matrix.py,
tests/integration/test_several_publications.py, test_failover_flag.py, test_recording.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from capture import ServerCapabilityError, slot_state
from capture.errors import EXIT_CONFIG
from daemon.wiring import prepare_configured_source
from tests.support.configs import make_config
from tests.support.harness import run_cli

pytestmark = pytest.mark.integration

SLOT = "w2d_refusal"
PLAIN = "public.t"
FILTERED = {"name": "public.t", "where": "id > 0"}
LISTED = {"name": "public.t", "columns": ["id"]}

Case = tuple[str, dict[str, Any], list[Any], str]
"""The server, the source settings, the tables, the setting the message names."""

REFUSALS: list[Case] = [
    ("pg14", {"two_phase": True}, [PLAIN], "source.two_phase"),
    ("pg14", {"protocol_version": 3}, [PLAIN], "source.protocol_version"),
    ("pg14", {"protocol_version": 4}, [PLAIN], "source.protocol_version"),
    ("pg14", {"streaming": "parallel"}, [PLAIN], "source.streaming"),
    ("pg14", {"origin": "none"}, [PLAIN], "source.origin"),
    ("pg14", {"failover": True}, [PLAIN], "source.failover"),
    ("pg14", {}, [FILTERED], "source.tables[].where"),
    ("pg14", {}, [LISTED], "source.tables[].columns"),
    ("pg15", {"protocol_version": 4}, [PLAIN], "source.protocol_version"),
    ("pg15", {"streaming": "parallel"}, [PLAIN], "source.streaming"),
    ("pg15", {"origin": "none"}, [PLAIN], "source.origin"),
    ("pg15", {"failover": True}, [PLAIN], "source.failover"),
    ("pg16", {"failover": True}, [PLAIN], "source.failover"),
]


def _case_id(case: Case) -> str:
    server, source, _, setting = case
    value = "-".join(f"{k}={v}" for k, v in source.items())
    return f"{server}-{value or setting.rpartition('.')[2]}"


@pytest.mark.parametrize("case", REFUSALS, ids=[_case_id(c) for c in REFUSALS])
def test_a_feature_the_server_lacks_stops_start_up_naming_version_and_setting(
    case: Case,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    server, source, tables, setting = case
    dsn: str = request.getfixturevalue(f"{server}_dsn")
    major = server.removeprefix("pg")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    config = make_config(dsn, tmp_path / "lake", tables, slot=SLOT, source=source)
    with pytest.raises(ServerCapabilityError) as caught:
        prepare_configured_source(config)
    message = str(caught.value)
    assert message.startswith(setting), message
    assert f"PostgreSQL {major}" in message, message
    assert caught.value.exit_code == EXIT_CONFIG
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert slot_state(conn, SLOT) is None, "refused before a slot was created"
        published = conn.execute("SELECT count(*) FROM pg_publication").fetchone()
    assert published == (0,), "refused before a publication was created"


def test_wal2delta_run_exits_2_naming_the_version_and_the_setting(
    pg14_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg14_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    config = tmp_path / "wal2delta.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "source": {
                    "dsn": pg14_dsn,
                    "slot": SLOT,
                    "publication": SLOT,
                    "tables": [PLAIN],
                    "two_phase": True,
                },
                "sink": {"path": str(tmp_path / "lake")},
                "spool": {"dir": str(tmp_path / "spool")},
                "metrics": {"enabled": False},
                "logging": {"format": "console", "level": "info"},
            }
        )
    )
    result = run_cli("run", "-c", str(config), timeout=180)
    output = result.stdout + result.stderr
    assert result.returncode == EXIT_CONFIG, output
    assert "source.two_phase" in output, output
    assert "PostgreSQL 14" in output, output
    assert "Traceback" not in output, output
