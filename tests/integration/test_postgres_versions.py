"""Every PostgreSQL major version the README promises (14 to 18) starts and speaks pgoutput.

Each server is the session fixture the cross-version tests use (``pg14`` ... ``pg18``,
tests/conftest.py): it runs the expected major version with ``wal_level = logical``, and a
pgoutput slot read with ``pg_logical_slot_get_binary_changes`` at the server's highest
protocol version yields messages our parser reads back (BEGIN, RELATION, INSERT, COMMIT).
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from capture.negotiation import max_protocol_version
from decoder import Begin, Commit, Insert, ProtocolOptions, Relation, parse_message
from devtools.pgserver import SUPPORTED_MAJORS, LocalPostgres
from tests.conftest import fresh_database

pytestmark = pytest.mark.integration


@pytest.fixture(params=[f"pg{major}" for major in SUPPORTED_MAJORS])
def server(request: pytest.FixtureRequest) -> LocalPostgres:
    postgres: LocalPostgres = request.getfixturevalue(request.param)
    return postgres


@pytest.fixture
def dsn(server: LocalPostgres) -> Iterator[str]:
    yield from fresh_database(server)


def test_the_server_runs_its_major_version_and_pgoutput_decodes_a_transaction(
    server: LocalPostgres, dsn: str
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        version_num = int(conn.execute("SHOW server_version_num").fetchone()[0])  # type: ignore[index]
        assert version_num // 10000 == server.version()
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("CREATE PUBLICATION p FOR TABLE t")
        conn.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
        # The SQL functions decode up to the flushed WAL; the test servers commit
        # asynchronously (conftest.TEST_SERVER_SETTINGS).
        conn.execute("SET synchronous_commit = on")
        conn.execute("INSERT INTO t VALUES (1, 'one'), (2, 'two')")
        proto = max_protocol_version(version_num)
        rows = conn.execute(
            "SELECT data FROM pg_logical_slot_get_binary_changes('s', NULL, NULL, "
            "'proto_version', %s, 'publication_names', 'p')",
            (str(proto),),
        ).fetchall()
    options = ProtocolOptions(proto_version=proto)
    messages = [parse_message(bytes(data), options=options, in_stream=False) for (data,) in rows]
    assert [type(m) for m in messages] == [Begin, Relation, Insert, Insert, Commit]
    relation = messages[1]
    assert isinstance(relation, Relation)
    assert (relation.namespace, relation.relation_name) == ("public", "t")
