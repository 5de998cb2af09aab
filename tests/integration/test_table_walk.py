"""The walk of one table of a batch (docs/architecture.md, the sink's parts): from
``TableWriter.write`` through the executor, the engine gateway and the lake port, each sink
file entered once, in the order of the architecture's diagram.

A file counts as entered when one of its functions starts a frame; a generator resumed at
the end of a ``with`` block is the frame entered before. The walk is traced with
``sys.settrace`` on a real sink and engine, so a new detour (a helper called back in a
file already left) fails here.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import sink
from sink import Batch, table_path
from sink.steps.writer import TableWriter
from tests.support.oracle import assert_delta_matches
from tests.support.settings import SinkFactory
from tests.support.sink_changes import INT4, batch, col, insert, rel, update

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SINK_ROOT = Path(sink.__file__).resolve().parent
ORDERS = rel("public.orders", col("id", INT4, key=True), col("item"))
PART_ORDER = ("steps", "engine", "lake")
"""The parts a table's write passes, in the diagram's order."""


@contextmanager
def traced_walk(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """The sink files entered under ``TableWriter.write`` during the block, as (file
    relative to ``sink/``, first function), consecutive entries of one file collapsed."""
    hops: list[tuple[str, str]] = []
    frames: list[FrameType] = []  # held, so no frame id is reused while tracing
    root = f"{SINK_ROOT}/"

    def tracer(frame: FrameType, event: str, _arg: Any) -> None:
        filename = frame.f_code.co_filename
        if event != "call" or not filename.startswith(root):
            return
        if any(seen is frame for seen in frames):
            return  # a with-block's generator resumed: entered before
        frames.append(frame)
        file = filename.removeprefix(root)
        if not hops or hops[-1][0] != file:
            hops.append((file, frame.f_code.co_name))

    write = TableWriter.write

    def traced_write(self: TableWriter, *args: Any, **kwargs: Any) -> Any:
        # A collection during the walk runs finalizers of objects left by earlier tests (a
        # sink never closed removes its source directory, in lake/sources.py): not part of
        # this walk. Collect first and hold the collector off while tracing.
        gc.collect()
        collecting = gc.isenabled()
        gc.disable()
        previous = sys.gettrace()
        sys.settrace(tracer)
        try:
            return write(self, *args, **kwargs)
        finally:
            sys.settrace(previous)
            if collecting:
                gc.enable()

    monkeypatch.setattr(TableWriter, "write", traced_write)
    yield hops


def walk_of(make_batch: Batch, sink_apply: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    with monkeypatch.context() as patch, traced_walk(patch) as hops:
        sink_apply(make_batch)
    return [file for file, _ in hops]


def assert_each_file_once_in_order(files: list[str], *, through: str) -> None:
    assert len(files) == len(set(files)), f"a file entered twice: {files}"
    assert files[0] == "steps/writer.py", files
    assert files[-1] == through, files
    parts = [file.split("/")[0] for file in files]
    ranks = [PART_ORDER.index(part) for part in parts]
    assert ranks == sorted(ranks), f"out of the diagram's order: {files}"


def test_a_table_write_enters_each_file_once_in_the_diagrams_order(
    make_sink: SinkFactory, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink_ = make_sink()
    # The table exists and the process has staged a source file once (its directory made).
    sink_.apply(batch(insert(ORDERS, "1", "a", lsn=10)))
    sink_.apply(batch(update(ORDERS, "1", "b", lsn=20)))

    appended = walk_of(batch(insert(ORDERS, "2", "c", lsn=30)), sink_.apply, monkeypatch)
    assert_each_file_once_in_order(appended, through="lake/tables.py")
    assert "steps/step_append.py" in appended

    merged = walk_of(batch(update(ORDERS, "2", "d", lsn=40)), sink_.apply, monkeypatch)
    assert_each_file_once_in_order(merged, through="lake/sources.py")
    assert "steps/step_keyed.py" in merged

    large = "x" * 120  # 3,000 rows of 120 bytes: appended through a source file
    rows = [insert(ORDERS, str(i), f"{large} {i}", lsn=50, ordinal=i) for i in range(3, 3003)]
    through_file = walk_of(batch(*rows), sink_.apply, monkeypatch)
    assert_each_file_once_in_order(through_file, through="lake/sources.py")

    expected = [{"id": 1, "item": "b"}, {"id": 2, "item": "d"}]
    expected += [{"id": i, "item": f"{large} {i}"} for i in range(3, 3003)]
    assert_delta_matches(table_path(str(lake), "public", "orders"), expected, key=["id"])
