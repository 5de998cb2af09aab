"""Blind appends to one Delta table from several threads at once, as snapshot workers do."""

from __future__ import annotations

import concurrent.futures
import threading

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from sink.lake.deltars import DeltaRsAppender


def append_from_threads(path: str, *, threads: int = 4, appends: int = 3) -> None:
    """Append ``threads * appends`` batches of 10 rows to a new table at ``path`` at once.

    Every append must land exactly once: the table ends at version ``threads * appends``
    with ids ``0 .. threads * appends * 10 - 1``. Raises AssertionError otherwise, or the
    first worker's error.
    """
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    write_deltalake(path, schema.empty_table())
    appender = DeltaRsAppender("auto")
    start = threading.Barrier(threads, timeout=60)

    def worker(number: int) -> None:
        start.wait()  # every thread writes and commits at the same moment
        for round_ in range(appends):
            first = (number * appends + round_) * 10
            ids = pa.array(range(first, first + 10), pa.int64())
            rows = pa.table({"id": ids, "v": pa.array(["x"] * 10)}, schema=schema)
            assert appender.append(path, rows, [], "appending t")

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for done in [pool.submit(worker, n) for n in range(threads)]:
            done.result()
    table = DeltaTable(path)
    assert table.version() == threads * appends
    ids = sorted(table.to_pyarrow_table()["id"].to_pylist())
    assert ids == list(range(threads * appends * 10))
