"""How the reason the server gives for ending a replication stream is classified."""

from __future__ import annotations

import pytest

from capture.errors import (
    ReplicationConnectionLostError,
    SlotUndecodableError,
    replication_stream_ended,
)


@pytest.mark.parametrize(
    "message",
    [
        'could not map filenumber "base/16384/16452" to relation OID',  # PostgreSQL 16+
        'could not map filenode "base/5/16394" to relation OID',  # before 16
    ],
)
def test_a_decoding_failure_that_repeats_is_not_retried(message: str) -> None:
    error = replication_stream_ended(message)
    assert isinstance(error, SlotUndecodableError)
    assert not error.retryable
    assert error.server_message == message
    assert str(error) == f"server ended the replication stream: {message}"


@pytest.mark.parametrize(
    "message",
    [
        None,
        "terminating connection due to administrator command",
        'publication "w2d" does not exist',
        "could not map the slot's file to anything",
    ],
)
def test_anything_else_is_a_lost_connection_and_retried(message: str | None) -> None:
    error = replication_stream_ended(message)
    assert isinstance(error, ReplicationConnectionLostError)
    assert error.retryable
    assert str(error).startswith("server ended the replication stream: ")
    assert (message or "no reason given") in str(error)
