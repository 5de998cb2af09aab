"""Crash harness: SIGKILL the daemon at random moments; Delta must still equal the source.

A seeded, randomised multi-table workload (inserts, updates, key changes, deletes, a table
of mostly new keys whose batches are appended rather than merged, truncates, savepoints,
large streamed transactions, prepared transactions, identical rows in a table without a
key, a table published with a row filter and a column list by a second publication, small
transactions spread over 46 more small tables) runs while the real daemon (``wal2delta
run`` in a subprocess) is killed with SIGKILL at random points - during the initial
snapshot, mid-MERGE, between a MERGE or an append and the batch's record and
acknowledgement, during a compaction - and started again, at least 20 times. The daemon
applies up to four tables of a batch at once (``sink.concurrency``) and holds back the
changes of a table that changes little (``sink.table_min_rows``) for up to two seconds, so
kills also fall while MERGEs run side by side and while changes wait, unacknowledged, for a
later batch. At the end every one of the 52 Delta tables, read with delta-rs, equals its
source table: nothing lost, nothing duplicated, no deleted row resurrected.

The harness is ``tests/support/crash_harness.py``. Replay a failure with
``WAL2DELTA_CRASH_SEED=<seed> pytest tests/e2e/test_crash.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.pgserver import LocalPostgres
from tests.support.crash_harness import run_crash_harness

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.mark.timeout(1500)
def test_sigkill_at_random_points_loses_and_duplicates_nothing(
    pg18: LocalPostgres, pg18_dsn: str, tmp_path: Path
) -> None:
    run_crash_harness(pg18, pg18_dsn, tmp_path)
