"""Engine errors become SinkError subclasses at the sink boundary, classified once."""

from __future__ import annotations

import enum

import pytest

from sink import SinkDataError, SinkError, SinkRetryableError
from sink.spark import classify_engine_error, engine_errors


class StatusCode(enum.Enum):
    """The gRPC status codes used here (StatusCode has no type stubs)."""

    UNAVAILABLE = 14
    DEADLINE_EXCEEDED = 4
    UNKNOWN = 2
    INTERNAL = 13


class FakeGrpcError(Exception):
    """Stands in for pyspark's SparkConnectGrpcException."""

    def __init__(self, message: str, code: StatusCode, condition: str | None = None):
        super().__init__(message)
        self._code = code
        self._condition = condition

    def getGrpcStatusCode(self) -> StatusCode:  # noqa: N802 - pyspark's name
        return self._code

    def getCondition(self) -> str | None:  # noqa: N802 - pyspark's name
        return self._condition


class AnalysisException(FakeGrpcError):  # noqa: N818 - named as pyspark names it
    pass


class ArithmeticException(FakeGrpcError):  # noqa: N818 - named as pyspark names it
    pass


@pytest.mark.parametrize("code", [StatusCode.UNAVAILABLE, StatusCode.DEADLINE_EXCEEDED])
def test_unreachable_engine_is_retryable(code: StatusCode) -> None:
    error = classify_engine_error(FakeGrpcError("failed to connect", code), "merging into a.b")
    assert isinstance(error, SinkRetryableError)
    assert error.retryable
    assert "merging into a.b" in str(error)


def test_connection_errors_from_the_client_are_retryable() -> None:
    assert isinstance(classify_engine_error(ConnectionResetError(), "x"), SinkRetryableError)


@pytest.mark.parametrize(
    "message",
    [
        "io.delta.exceptions.ConcurrentAppendException: Files were added",
        # Sail: a MERGE finding the table committed to since it read it (seen in the
        # online-copy crash harness), a conflict, a lost race for a version.
        "Failed to commit transaction: 0",
        "Failed to commit transaction: Commit failed: a concurrent transaction deleted data",
        "Tried committing existing table version: 7",
    ],
)
def test_delta_concurrent_commit_conflicts_are_retryable(message: str) -> None:
    exc = FakeGrpcError(message, StatusCode.UNKNOWN)
    error = classify_engine_error(exc, "merging into a.b")
    assert isinstance(error, SinkRetryableError)
    assert "a concurrent commit conflicted while merging into a.b" in str(error)


def test_a_row_value_that_says_concurrent_does_not_make_an_error_retryable() -> None:
    exc = AnalysisException("cannot cast 'concurrent conflict' to INT", StatusCode.UNKNOWN)
    assert not classify_engine_error(exc, "x").retryable


@pytest.mark.parametrize(
    "exc",
    [
        AnalysisException(
            "[INCOMPATIBLE_DATA_FOR_TABLE.CANNOT_SAFELY_CAST] Cannot safely cast",
            StatusCode.INTERNAL,
        ),
        AnalysisException("x", StatusCode.INTERNAL, "CAST_INVALID_INPUT"),
        ArithmeticException("overflow", StatusCode.INTERNAL),
    ],
)
def test_data_that_does_not_fit_is_a_terminal_data_error(exc: Exception) -> None:
    error = classify_engine_error(exc, "merging into a.b")
    assert type(error) is SinkDataError
    assert not error.retryable


def test_other_engine_failures_are_terminal_and_say_what_the_engine_said() -> None:
    exc = AnalysisException(
        "[PATH_NOT_FOUND] Path does not exist: s3://lake/t; token=abc123\n\tat org.apache...",
        StatusCode.INTERNAL,
        "X_Y",
    )
    error = classify_engine_error(exc, "truncating a.b")
    assert type(error) is SinkError
    assert "(AnalysisException, X_Y)" in str(error)
    assert "Path does not exist: s3://lake/t" in str(error)  # the engine's own words
    assert "abc123" not in str(error)  # secrets masked
    assert "org.apache" not in str(error)  # first line only
    long = classify_engine_error(AnalysisException("x" * 1000, StatusCode.INTERNAL), "y")
    assert len(str(long)) < 500


def test_data_errors_show_the_engine_message_first_line_with_secrets_masked() -> None:
    exc = ArithmeticException(
        "value 42 overflows (password=hunter2)\n\tat org.apache.Thing", StatusCode.INTERNAL
    )
    error = classify_engine_error(exc, "merging into a.b")
    assert type(error) is SinkDataError
    assert "value 42 overflows" in str(error)  # the cause, in the same message
    assert "hunter2" not in str(error)
    assert "org.apache" not in str(error)


def test_engine_errors_chains_the_original_and_lets_sink_errors_through() -> None:
    original = ArithmeticException("overflow", StatusCode.INTERNAL)
    with pytest.raises(SinkDataError) as caught, engine_errors("merging into a.b"):
        raise original
    assert caught.value.__cause__ is original
    already = SinkDataError("ours")
    with pytest.raises(SinkDataError) as passed, engine_errors("x"):
        raise already
    assert passed.value is already
