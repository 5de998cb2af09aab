"""``wal2delta resync``: ask the running daemon, wherever it runs, to copy tables again.

The request is a transactional logical decoding message on the source
(``pg_logical_emit_message(true, 'wal2delta.resync', '{"tables": [...]}')``): the daemon
reads it in commit order through its own slot, records it next to the data
(``<path>/_wal2delta_copies``) and copies the tables while streaming
(``sink/copies/copies.py``, ``capture/tablecopy.py``). No port to reach, no pod to find: any
process that can connect to the source can ask. The command returns once the message is
committed (the request is on record in the WAL the daemon reads); ``--wait`` then polls
the lake until every table's copy made after the request is done.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from capture import with_text_form_settings
from config import AppConfig, parse_table_name
from daemon.wiring import source_conninfo
from decoder import Lsn, parse_lsn
from sink import RESYNC_PREFIX, read_copy_records, resync_message


@dataclass(frozen=True, slots=True)
class ResyncRequest:
    """A request on record: its tables and the LSN of its message."""

    tables: tuple[str, ...]
    lsn: Lsn
    unpublished: tuple[str, ...]
    """Tables the publications do not publish now (their copy will be empty)."""


def request_resync(config: AppConfig, tables: Sequence[str]) -> ResyncRequest:
    """Write the request message on the source; return once it is committed.

    Raises:
        ValueError: a table name is not ``schema.table``.
        psycopg.Error: the source could not be reached or refused.
    """
    names = tuple(_qualified(name) for name in tables)
    conninfo = with_text_form_settings(source_conninfo(config))
    with psycopg.connect(conninfo, application_name="wal2delta-resync") as conn:
        published = {
            f"{row[0]}.{row[1]}"
            for row in conn.execute(
                "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = ANY(%s)",
                (list(config.source.publication),),
            )
        }
        row = conn.execute(
            "SELECT pg_logical_emit_message(true, %s, %s::bytea)::text",
            (RESYNC_PREFIX, resync_message(names)),
        ).fetchone()
        conn.commit()
    assert row is not None
    return ResyncRequest(
        names, parse_lsn(str(row[0])), tuple(n for n in names if n not in published)
    )


def wait_for_copies(config: AppConfig, request: ResyncRequest, timeout: float) -> list[str]:
    """Wait until each table's copy made after the request is done; return the tables
    still not copied when ``timeout`` seconds passed (empty: all done)."""
    deadline = time.monotonic() + timeout
    while True:
        pending = _not_copied(config, request)
        if not pending or time.monotonic() >= deadline:
            return pending
        time.sleep(1.0)


def _not_copied(config: AppConfig, request: ResyncRequest) -> list[str]:
    done = {
        copy.table
        for copy in read_copy_records(str(config.sink.path))
        if copy.state == "done"
        and copy.consistent_point is not None
        and copy.consistent_point > request.lsn
    }
    return [t for t in request.tables if t not in done]


def _qualified(name: str) -> str:
    schema, table = parse_table_name(name)
    return f"{schema}.{table}"
