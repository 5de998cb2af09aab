"""A local S3 for the tests: moto's server on loopback, and the environment that points
the daemon, its engine and delta-rs at it (as the Kubernetes manifests pass ``AWS_*``)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def aws_environment(endpoint: str) -> dict[str, str]:
    """The ``AWS_*`` variables that send S3 requests to ``endpoint`` over plain HTTP."""
    return {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ENDPOINT": endpoint,
        "AWS_ALLOW_HTTP": "true",
    }


@contextmanager
def moto_s3(bucket: str) -> Iterator[str]:
    """moto's S3 server on a free loopback port with ``bucket`` created; yields its URL."""
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(
                    urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=2
                )
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("moto's S3 server did not start")
                time.sleep(0.2)
        yield endpoint
    finally:
        server.terminate()
        server.wait(10)
