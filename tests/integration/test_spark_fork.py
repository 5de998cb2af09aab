"""Commands run by a process whose Spark Connect client is busy survive the fork.

With gRPC's fork support on (its core default), grpcio 1.81 and later restart their poller
thread in the forked child, where ``subprocess`` has closed its epoll descriptor before
``exec``: the child dies by SIGSEGV (grpc/grpc#43055). The suite's ``pg_ctl restart``
during a daemon run died that way. ``sink.spark`` switches fork support off.
"""

from __future__ import annotations

import os
import subprocess
import threading
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

RUNS = 300


def test_subprocesses_run_while_spark_calls_are_in_flight(spark_session: Any) -> None:
    assert os.environ["GRPC_ENABLE_FORK_SUPPORT"] == "false"
    stop = threading.Event()
    calls = 0

    def query() -> None:
        nonlocal calls
        while not stop.is_set():
            spark_session.sql("SELECT 1").collect()
            calls += 1

    busy = threading.Thread(target=query)
    busy.start()
    failures: list[str] = []
    try:
        for _ in range(RUNS):
            # user/group make subprocess fork (not vfork or posix_spawn), as pg_ctl's runs do.
            done = subprocess.run(
                ["/bin/true"],
                user=os.getuid(),
                group=os.getgid(),
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                failures.append(f"exit {done.returncode}: {done.stderr[-300:]}")
    finally:
        stop.set()
        busy.join(30)
    assert calls > RUNS // 10, "the Spark thread was not busy during the forks"
    assert not failures, failures[:3]
