"""Measure the peak RSS of the capture + decode stage for one large transaction.

Run as ``python -m tests.support.memory_probe DSN ROWS WORKDIR``: creates a table, writes
ROWS rows in a single transaction, streams it through ``daemon.Supervisor`` into a sink that
only counts, and prints one JSON object with the peak RSS (KiB), the rows seen and the
changes of the largest batch. It runs in its own process so that ``ru_maxrss`` measures
only this stage.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

import psycopg

from capture.slots import current_wal_lsn
from daemon.supervisor import Supervisor
from daemon.wiring import prepare_configured_source
from decoder import RowChange
from sink import Batch, BatchResult
from tests.support.configs import make_config


class CountingSink:
    """Counts row changes and keeps nothing but the size of the largest batch."""

    def __init__(self) -> None:
        self.rows = 0
        self.largest_batch = 0

    def apply(self, batch: Batch) -> BatchResult:
        self.rows += sum(1 for c in batch.changes if isinstance(c, RowChange))
        self.largest_batch = max(self.largest_batch, len(batch.changes))
        return BatchResult(rows_by_table={}, toast_anomalies=0, duration_seconds=0.0)

    def close(self) -> None:
        return None


def main(dsn: str, rows: int, workdir: Path) -> None:
    table = f"big_{rows}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE public.{table} (id int PRIMARY KEY, payload text)")
    config = make_config(
        dsn,
        workdir / "lake",
        [f"public.{table}"],
        slot=f"probe_{rows}",
        sink={"batch": {"max_rows": 5000}},
        spool={"dir": str(workdir / "spool"), "memory_limit": "1MiB"},
    )
    prepare_configured_source(config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO public.{table} SELECT g, md5(g::text) FROM generate_series(1, %s) g",
            (rows,),
        )
        endpos = current_wal_lsn(conn)
    sink = CountingSink()
    service = Supervisor(config, sink, endpos=endpos)
    service.run()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {"rows": sink.rows, "peak_rss_kib": peak_kib, "largest_batch": sink.largest_batch}
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
