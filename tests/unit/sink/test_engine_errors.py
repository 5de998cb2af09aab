"""Engine errors become SinkError subclasses at the sink boundary, classified once."""

from __future__ import annotations

import enum
import pickle

import pytest

from sink import SinkDataError, SinkError, SinkRetryableError
from sink.base import SinkStoreError
from sink.engine.spark import (
    STORE_OPERATIONS,
    classify_engine_error,
    engine_errors,
    store_fault,
    store_operation,
)


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


class IllegalArgumentException(FakeGrpcError):  # noqa: N818 - named as pyspark names it
    pass


def test_an_operation_a_restarted_engine_lost_is_retryable_not_a_data_error() -> None:
    # What pyspark raises for a call in flight when the Sail server it reattaches to was
    # restarted (seen with a SIGKILLed local-cluster server, decision 0124).
    exc = IllegalArgumentException(
        "invalid argument: operation not found: 73c1943a-8b45-4d70-b955-ce905b5ab92c",
        StatusCode.INTERNAL,
    )
    error = classify_engine_error(exc, "merging into a.b")
    assert type(error) is SinkRetryableError
    assert "lost the session's state while merging into a.b" in str(error)
    # A restart between registering a MERGE's inline source and the MERGE.
    lost_view = AnalysisException(
        "Temporary View not found: __w2d_source_6", StatusCode.INTERNAL, None
    )
    assert type(classify_engine_error(lost_view, "merging into a.b")) is SinkRetryableError
    other_view = AnalysisException("Temporary View not found: users", StatusCode.INTERNAL)
    assert type(classify_engine_error(other_view, "reading")) is SinkError
    # The same exception class with anything else stays a data error, and a row value that
    # quotes the words does not make one retryable.
    for text in (
        "invalid argument: bad value",
        "invalid argument: value 'operation not found: 73c1943a-8b45-4d70-b955-ce905b5ab92c'",
    ):
        assert type(
            classify_engine_error(IllegalArgumentException(text, StatusCode.INTERNAL), "x")
        ) is (SinkDataError)


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


# Object-store faults: the messages below are what Sail 0.7.2 (through pyspark) and
# deltalake 1.6.6 raised against moto behind tests/support/faultproxy.py (decision 0115).
_SLOW_DOWN_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code><Message>Please '
    "reduce your request rate.</Message><Resource>/lake/t/part-1.parquet</Resource></Error>"
)
_SAIL_PUT_503 = (
    "Failed to write file: Generic S3 error: Error performing PUT "
    "http://127.0.0.1:34867/lake/t/part-00001-7eaa.snappy.parquet in 1.487464613s, after 10 "
    "retries, max_retries: 10, retry_timeout: 180s  - Server returned non-2xx status code: "
    "503 Service Unavailable: " + _SLOW_DOWN_XML
)
_SAIL_PUT_500 = _SAIL_PUT_503.replace("503 Service Unavailable", "500 Internal Server Error")
_SAIL_PUT_RESET = (
    "Failed to write file: Generic S3 error: Error performing PUT "
    "http://127.0.0.1:34867/lake/t/part-00001-0f31.snappy.parquet in 1.51979156s, after 10 "
    "retries, max_retries: 10, retry_timeout: 180s  - HTTP error: error sending request"
)
_SAIL_LOG_READ_503 = "Server returned non-2xx status code: 503 Service Unavailable: "
_DELTA_RS_COMMIT_RESET = (
    "Generic S3 error\n          \x1b[31m↳\x1b[0m Error performing PUT "
    "http://127.0.0.1:34867/lake/d/_delta_log/00000000000000000000.json in 8.675608ms - HTTP "
    "error\n           \x1b[31m↳\x1b[0m error sending request\n            \x1b[31m↳\x1b[0m "
    "client error (SendRequest)\n              \x1b[31m↳\x1b[0m Connection reset by peer "
    "(os error 104)"
)
_DELTA_RS_PUT_503 = (
    "Failed to parse parquet: External: Generic S3 error: Error performing PUT "
    "http://127.0.0.1:34867/lake/d/part-00000-1a0f.snappy.parquet in 2.6s, after 10 retries, "
    "max_retries: 10, retry_timeout: 180s  - Server returned non-2xx status code: 503 "
    "Service Unavailable: " + _SLOW_DOWN_XML
)


class SparkRuntimeException(FakeGrpcError):  # noqa: N818 - named as pyspark names it
    pass


class DeltaError(Exception):
    """Stands in for deltalake's DeltaError."""


@pytest.mark.parametrize(
    ("exc", "store_error", "operation"),
    [
        (
            SparkRuntimeException(_SAIL_PUT_503, StatusCode.INTERNAL),
            "Generic S3 error: 503 Service Unavailable (SlowDown) on PUT "
            "/lake/t/part-00001-7eaa.snappy.parquet",
            "merge",
        ),
        (
            SparkRuntimeException(_SAIL_PUT_500, StatusCode.INTERNAL),
            "Generic S3 error: 500 Internal Server Error (SlowDown) on PUT "
            "/lake/t/part-00001-7eaa.snappy.parquet",
            "merge",
        ),
        (
            SparkRuntimeException(_SAIL_PUT_RESET, StatusCode.INTERNAL),
            "Generic S3 error: error sending request on PUT /lake/t/part-00001-0f31.snappy.parquet",
            "merge",
        ),
        # A commit's conditional PUT reset after it was sent: Sail says only this.
        (
            SparkRuntimeException("Connection reset by peer (os error 104)", StatusCode.INTERNAL),
            "Connection reset by peer (os error 104)",
            "merge",
        ),
        (
            SparkRuntimeException(_SAIL_LOG_READ_503, StatusCode.INTERNAL),
            "the store answered: 503 Service Unavailable",
            "merge",
        ),
        (
            OSError(_DELTA_RS_COMMIT_RESET),
            "Generic S3 error: error sending request on PUT "
            "/lake/d/_delta_log/00000000000000000000.json",
            "commit",
        ),
        (
            DeltaError(_DELTA_RS_PUT_503),
            "Generic S3 error: 503 Service Unavailable (SlowDown) on PUT "
            "/lake/d/part-00000-1a0f.snappy.parquet",
            "merge",
        ),
    ],
)
def test_transient_object_store_faults_are_store_errors_naming_the_stores_error(
    exc: Exception, store_error: str, operation: str
) -> None:
    error = classify_engine_error(exc, "merging into a.b")
    assert isinstance(error, SinkStoreError)
    assert isinstance(error, SinkRetryableError)
    assert error.retryable
    assert error.store_error == store_error
    assert error.operation == operation
    assert f"while merging into a.b ({type(exc).__name__}): {store_error}" in str(error)
    assert store_fault(exc, "merging into a.b") is not None


@pytest.mark.parametrize(
    ("action", "request_", "operation"),
    [
        ("merging into public.t", "", "merge"),
        ("appending the snapshot of public.t", "", "append"),
        ("recording batches in the commit log", "", "commit"),
        ("reading the commit log", "", "read"),
        ("creating or reading the Delta table of _wal2delta_snapshots", "", "write"),
        ("vacuuming", "", "other"),
        ("merging into public.t", "PUT /l/t/_delta_log/00000000000000000007.json", "commit"),
        (
            "merging into public.t",
            "PUT /l/t/_delta_log/00000000000000000010.checkpoint.parquet",
            "checkpoint",
        ),
        ("merging into public.t", "GET /l/t/_delta_log/00000000000000000007.json", "merge"),
    ],
)
def test_the_operation_label_is_one_of_a_bounded_set(
    action: str, request_: str, operation: str
) -> None:
    assert store_operation(action, request_) == operation
    assert operation in STORE_OPERATIONS


@pytest.mark.parametrize(
    "message",
    [
        # Not transient: a missing bucket, refused credentials.
        "Generic S3 error: Error performing GET http://h/b?list-type=2 in 52ms - Server "
        "returned non-2xx status code: 404 Not Found: <Error><Code>NoSuchBucket</Code></Error>",
        "Generic S3 error: Error performing PUT http://h/b/k in 5ms - Server returned non-2xx "
        "status code: 403 Forbidden: <Error><Code>AccessDenied</Code></Error>",
        # delta-rs's own error, not the store's.
        "Generic DeltaTable error: timed out waiting for the table",
        # An OS connection error quoted inside another message is not the whole message.
        "Invalid table: Connection reset by peer (os error 104) seen in a value",
    ],
)
def test_store_errors_that_retrying_cannot_fix_stay_terminal(message: str) -> None:
    error = classify_engine_error(SparkRuntimeException(message, StatusCode.INTERNAL), "x")
    assert type(error) is SinkError
    assert not error.retryable


def test_a_row_value_that_quotes_a_store_error_in_a_data_error_stays_a_data_error() -> None:
    exc = AnalysisException(
        "[CAST_INVALID_INPUT] The value 'Generic S3 error: 503 Service Unavailable error "
        "sending request' of the type STRING cannot be cast to INT",
        StatusCode.INTERNAL,
    )
    assert type(classify_engine_error(exc, "merging into a.b")) is SinkDataError


def test_store_errors_survive_pickling() -> None:
    error = classify_engine_error(
        SparkRuntimeException(_SAIL_PUT_503, StatusCode.INTERNAL), "merging into a.b"
    )
    assert isinstance(error, SinkStoreError)
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.operation, copy.store_error) == (
        str(error),
        error.operation,
        error.store_error,
    )
