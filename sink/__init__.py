"""The Delta sink: PostgreSQL changes merged into Delta Lake tables through Spark.

``DeltaSink`` plans each batch without Spark (``plan``), renders MERGE statements
(``sql``) and runs them on the process's Spark session (``spark``); ``typemap`` maps
PostgreSQL types to Delta types; ``evolution`` decides how a table follows a changed
relation, with the source catalog (``SourceCatalog``) that capture injects.
"""

from sink.base import Batch, BatchResult, Sink, SinkDataError, SinkError, SinkRetryableError
from sink.delta import DeltaSink, table_path
from sink.evolution import CatalogColumn, CatalogTable, SourceCatalog
from sink.settings import KeyBuckets, SinkSettings, SparkSettings
from sink.spark import create_spark_session, stop_spark_session

__all__ = [
    "Batch",
    "BatchResult",
    "CatalogColumn",
    "CatalogTable",
    "DeltaSink",
    "KeyBuckets",
    "Sink",
    "SinkDataError",
    "SinkError",
    "SinkRetryableError",
    "SinkSettings",
    "SourceCatalog",
    "SparkSettings",
    "create_spark_session",
    "stop_spark_session",
    "table_path",
]
