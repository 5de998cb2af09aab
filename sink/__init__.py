"""The Delta sink: PostgreSQL changes merged into Delta Lake tables through Spark."""

from sink.base import Batch, BatchResult, Sink, SinkDataError, SinkError, SinkRetryableError
from sink.settings import SinkSettings, SparkSettings

__all__ = [
    "Batch",
    "BatchResult",
    "Sink",
    "SinkDataError",
    "SinkError",
    "SinkRetryableError",
    "SinkSettings",
    "SparkSettings",
]
