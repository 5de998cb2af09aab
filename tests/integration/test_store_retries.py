"""The supervisor's retries after object-store faults (decision 0115), against a real
PostgreSQL 18 and an in-memory sink that raises ``SinkStoreError`` as the Delta sink does
when the store fails: each failure is retried from the acknowledged position with its own
bound, counted and logged; failures count in a row (progress starts the count again); past
the bound the error is terminal and names the store's error.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from capture.slots import current_wal_lsn
from config import AppConfig
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source
from decoder import Lsn, RowChange
from sink import Batch, BatchResult, SinkError
from sink.base import SinkStoreError
from tests.support.configs import make_config
from tests.support.harness import confirmed_flush
from tests.support.model_sink import ModelSink

pytestmark = pytest.mark.integration

STORE_ERROR = "Generic S3 error: 503 Service Unavailable (SlowDown) on PUT /lake/t/part-1.parquet"


def _store_error() -> SinkStoreError:
    return SinkStoreError(
        f"the object store failed while merging into public.items (E): {STORE_ERROR}",
        operation="merge",
        store_error=STORE_ERROR,
    )


class FlakyStore(ModelSink):
    """Fails a batch that holds the insert of a row id in ``fail``, as many times as it
    says for that id (``always``: every batch); the rest is applied."""

    def __init__(self, fail: dict[int, int] | None = None, *, always: bool = False) -> None:
        super().__init__()
        self.fail = dict(fail or {})
        self.always = always
        self.failures = 0

    def apply(self, batch: Batch) -> BatchResult:
        ids = {
            int(str(self._row(c.relation, c, "new")["id"]))
            for c in batch.changes
            if isinstance(c, RowChange) and c.new is not None
        }
        due = [i for i in ids if self.fail.get(i, 0) > 0]
        if self.always or due:
            for i in due:
                self.fail[i] -= 1
            self.failures += 1
            raise _store_error()
        return super().apply(batch)


def _stream(dsn: str, tmp_path: Path, max_attempts: int) -> tuple[AppConfig, Lsn]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.items (id int PRIMARY KEY, label text)")
    config = make_config(
        dsn,
        tmp_path / "lake",
        ["public.items"],
        source={"reconnect": {"initial_delay": "100ms", "max_delay": "200ms", "max_attempts": 1}},
        sink={
            # Batches of two rows, also while the daemon catches up with the rows written
            # before it started (``capture/batcher.py``: it grows batches to the ceiling).
            "batch": {"max_rows": 2, "max_rows_ceiling": 2},
            "store_retries": {
                "max_attempts": max_attempts,
                "initial_delay": "50ms",
                "max_delay": "100ms",
            },
        },
    )
    prepare_configured_source(config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(1, 11):
            conn.execute("INSERT INTO items VALUES (%s, 'x')", (i,))
        endpos = Lsn(current_wal_lsn(conn))
    return config, endpos


def _ids(model: ModelSink) -> list[int]:
    return sorted(int(str(k[0]).strip("'")) for k in model.tables["public.items"])


def test_store_failures_are_retried_without_loss_and_without_using_reconnect_attempts(
    pg18_dsn: str, tmp_path: Path
) -> None:
    config, endpos = _stream(pg18_dsn, tmp_path, max_attempts=3)
    # The batch of row 5 fails three times in a row (the bound), then lands.
    model = FlakyStore({5: 3})
    service = Supervisor(config, model, endpos=endpos)
    service.run()
    assert model.failures == 3
    assert service.metrics.store_retries.labels(operation="merge")._value.get() == 3
    # source.reconnect.max_attempts is 1: store retries have their own bound.
    assert service.metrics.reconnects._value.get() == 0
    assert _ids(model) == list(range(1, 11))
    assert confirmed_flush(pg18_dsn, config.source.slot) >= endpos


def test_failures_count_in_a_row_and_progress_starts_the_count_again(
    pg18_dsn: str, tmp_path: Path
) -> None:
    config, endpos = _stream(pg18_dsn, tmp_path, max_attempts=1)
    # Three batches fail once each, with durable batches in between: never two in a row.
    model = FlakyStore({3: 1, 6: 1, 9: 1})
    service = Supervisor(config, model, endpos=endpos)
    service.run()
    assert model.failures == 3
    assert service.metrics.store_retries.labels(operation="merge")._value.get() == 3
    assert _ids(model) == list(range(1, 11))


def test_a_store_that_keeps_failing_stops_the_run_naming_the_stores_error(
    pg18_dsn: str, tmp_path: Path
) -> None:
    config, endpos = _stream(pg18_dsn, tmp_path, max_attempts=2)
    model = FlakyStore(always=True)
    service = Supervisor(config, model, endpos=endpos)
    with pytest.raises(SinkError) as stopped:
        service.run()
    assert not stopped.value.retryable
    assert isinstance(stopped.value.__cause__, SinkStoreError)
    assert "failed 3 times in a row" in str(stopped.value)
    assert STORE_ERROR in str(stopped.value)
    assert model.failures == 3
    assert service.metrics.store_retries.labels(operation="merge")._value.get() == 2
    # Nothing was acknowledged past the start.
    assert confirmed_flush(pg18_dsn, config.source.slot) < endpos
