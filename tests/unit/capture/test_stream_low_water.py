"""The bulk wait's low-water mark on a descriptor that is not a socket (``capture.stream``).

A real replication socket is covered by ``tests/integration/test_bulk_reads.py``; here the
wait must fall back to a plain wait and leave no descriptor behind.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from capture.stream import ReplicationStream


def _open_descriptors() -> int:
    return len(list(Path("/proc/self/fd").iterdir()))


def test_a_bulk_wait_on_a_descriptor_that_is_no_socket_waits_as_before() -> None:
    reader, writer = os.pipe()
    try:
        conn = SimpleNamespace(pgconn=SimpleNamespace(socket=reader), closed=True)
        stream = ReplicationStream(cast(Any, conn))
        before = _open_descriptors()
        assert not stream.wait_readable(0.01, bulk=True)  # nothing written yet
        os.write(writer, b"x")
        assert stream.wait_readable(1.0, bulk=True)  # one byte is enough: no mark applies
        assert stream.wait_readable(1.0)
        assert _open_descriptors() == before
    finally:
        os.close(reader)
        os.close(writer)
