"""Wiring: the validated configuration turned into the plain settings of each layer.

``config`` is read here and in the rest of ``daemon`` only; ``capture`` and ``sink`` get
frozen settings objects (``CaptureSettings``, ``SinkSettings``, ``SparkSettings``). Those
objects have no defaults for what the configuration sets: every value comes from here,
derived from ``AppConfig``, so a default is written once, in ``config/models.py``. Tests and
benchmarks that drive a layer directly build its settings with these functions too
(``tests/support/settings.py``, ``bench/settings.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from capture import (
    BatchSettings,
    CaptureSettings,
    PublishedTable,
    ReconnectSettings,
    ReplicationRequest,
    SnapshotTuning,
    with_connection_defaults,
    with_text_form_settings,
)
from config import (
    ORDINAL_COLUMN,
    ROW_LSN_COLUMN,
    ROW_ORDINAL_COLUMN,
    AppConfig,
    BackoffConfig,
    parse_table_name,
)
from sink import KeyBuckets, MetadataColumns, SinkSettings, SnapshotMarkerStore, SparkSettings

if TYPE_CHECKING:
    from capture import SourceInfo


def capture_settings(config: AppConfig) -> CaptureSettings:
    """Translate the source, snapshot, batch, spool and shutdown sections for ``capture``.

    The connection string (password included) is resolved again by every new connection
    (``CaptureSettings.conninfo``): a rotated ``source.password_file`` is read by the next
    session, monitor or copy connection without a restart.
    """
    source = config.source
    batch = config.sink.batch
    return CaptureSettings(
        resolve_conninfo=lambda: with_text_form_settings(source_conninfo(config)),
        slot=source.slot,
        publications=tuple(source.publication),
        tables=tuple(published_tables(config)),
        create_publication=source.create_publication,
        publish_via_partition_root=source.publish_via_partition_root,
        create_slot=source.create_slot,
        request=ReplicationRequest(
            protocol_version=source.protocol_version,
            streaming=source.streaming,
            two_phase=source.two_phase,
            binary=source.binary,
            messages=source.messages,
            origin=source.origin,
        ),
        connect_timeout=source.connect_timeout.total_seconds(),
        receive_timeout=source.receive_timeout.total_seconds(),
        status_interval=source.status_interval.total_seconds(),
        initial_snapshot=config.snapshot.mode == "initial",
        snapshot=SnapshotTuning(
            parallelism=config.snapshot.parallelism,
            chunk_bytes=int(config.snapshot.chunk_size),
        ),
        batch=BatchSettings(
            max_rows=batch.max_rows,
            max_age=batch.max_age.total_seconds(),
            max_rows_ceiling=batch.max_rows_ceiling,
            max_bytes=int(batch.max_bytes),
            close_when_idle=batch.close_when_idle,
        ),
        spool_dir=Path(config.spool.dir) if config.spool.dir is not None else None,
        spool_memory_limit=int(config.spool.memory_limit),
        spool_max_bytes=(
            int(config.spool.max_bytes) if config.spool.max_bytes is not None else None
        ),
        shutdown_grace=config.shutdown.grace_period.total_seconds(),
        failover=source.failover,
        on_slot_loss=config.snapshot.on_slot_loss,
        new_tables_interval=config.snapshot.new_tables_interval.total_seconds(),
    )


def source_conninfo(config: AppConfig) -> str:
    """The source's connection string for any connection the daemon opens: the password
    merged in (a password file read now) and the libpq defaults of
    ``capture.with_connection_defaults`` - TCP keepalives, ``tcp_user_timeout`` and
    ``source.connect_timeout`` - where the DSN does not name them. Never log it."""
    source = config.source
    return with_connection_defaults(
        source.conninfo(), connect_timeout=source.connect_timeout.total_seconds()
    )


def prepare_configured_source(
    config: AppConfig, markers: SnapshotMarkerStore | None = None
) -> SourceInfo:
    """``capture.prepare_source`` for a configuration: publication, slot, negotiation."""
    # Imported here: capture's start-up imports the snapshot copier (Arrow, ADBC), which
    # check-config and status, importing this module, never need (docs/decisions/0119-*).
    from capture import prepare_source  # noqa: PLC0415

    return prepare_source(capture_settings(config), markers)


def reconnect_settings(config: AppConfig) -> ReconnectSettings:
    """Backoff between sessions (``source.reconnect``)."""
    return backoff_settings(config.source.reconnect)


def store_retry_settings(config: AppConfig) -> ReconnectSettings:
    """Backoff and bound of the retries after object-store faults (``sink.store_retries``),
    in the shape of the reconnect backoff."""
    return backoff_settings(config.sink.store_retries)


def backoff_settings(section: BackoffConfig) -> ReconnectSettings:
    """A configured backoff in seconds for ``capture``."""
    return ReconnectSettings(
        initial_delay=section.initial_delay.total_seconds(),
        max_delay=section.max_delay.total_seconds(),
        max_attempts=section.max_attempts,
    )


def published_tables(config: AppConfig) -> list[PublishedTable]:
    """The configured tables as ``PublishedTable`` values."""
    tables = []
    for table in config.source.tables:
        columns = tuple(table.columns) if table.columns else None
        tables.append(PublishedTable(table.schema_name, table.table_name, table.where, columns))
    return tables


def sink_settings(config: AppConfig) -> SinkSettings:
    """Translate the sink section of the configuration for ``sink``."""
    sink = config.sink
    default_policy, table_policies = sink.unrepresentable_policies()
    return SinkSettings(
        path=str(sink.path),
        metadata=MetadataColumns(
            lsn=sink.metadata.lsn_column,
            commit_time=sink.metadata.commit_time_column,
            deleted=sink.metadata.deleted_column,
            ordinal=ORDINAL_COLUMN,
            soft_delete=sink.soft_delete,
            key_bucket=sink.metadata.key_bucket_column,
            row_lsn=ROW_LSN_COLUMN,
            row_ordinal=ROW_ORDINAL_COLUMN,
        ),
        messages_table=sink.messages == "table",
        keys=configured_keys(config),
        on_missing_key=config.source.on_missing_key,
        key_buckets={
            relation_name(name): KeyBuckets(width=entry.width, column=entry.column)
            for name, entry in sink.partition_by_key.items()
        },
        column_names=sink.column_names,
        bulk_writer=config.snapshot.writer,
        compact_after_writes=sink.compact_after_writes,
        history=(
            sink.history
            if isinstance(sink.history, bool)
            else frozenset(relation_name(name) for name in sink.history)
        ),
        column_types={
            relation_name(name): dict(columns) for name, columns in sink.column_types.items()
        },
        on_unrepresentable=default_policy,
        on_unrepresentable_tables={
            relation_name(name): policy for name, policy in table_policies.items()
        },
        concurrency=sink.concurrency,
        table_min_rows=sink.table_min_rows,
        table_max_age=sink.table_max_age.total_seconds(),
        deletion_vectors=(
            sink.deletion_vectors
            if isinstance(sink.deletion_vectors, bool)
            else frozenset(relation_name(name) for name in sink.deletion_vectors)
        ),
        retention=None if sink.retention is None else sink.retention.total_seconds(),
        log_retention=None if sink.log_retention is None else sink.log_retention.total_seconds(),
    )


def configured_keys(config: AppConfig) -> dict[str, tuple[str, ...]]:
    """MERGE keys from ``source.tables[].key`` and ``sink.keys`` (they must agree).

    Keyed by the sink's table names (``relation_name``).
    """
    keys = {relation_name(name): tuple(columns) for name, columns in config.sink.keys.items()}
    for table in config.source.tables:
        if table.key is not None:
            keys[relation_name(table.qualified_name)] = tuple(table.key)
    return keys


def relation_name(configured: str) -> str:
    """The sink's name of a configured table: ``schema.table`` as the relation spells it.

    The configuration quotes a part that contains a dot (``public."a.b"``); pgoutput's
    relation names are exact, and the sink looks tables up by ``Relation.qualified_name``
    (``public.a.b``).
    """
    schema, table = parse_table_name(configured)
    return f"{schema}.{table}"


def spark_settings(config: AppConfig) -> SparkSettings:
    """Translate ``sink.spark`` for ``sink.create_spark_session``."""
    spark = config.sink.spark
    return SparkSettings(
        mode=spark.mode,
        url=spark.url,
        conf=dict(spark.conf),
        parallelism=None if spark.parallelism == "auto" else spark.parallelism,
        call_timeout=spark.call_timeout.total_seconds() or None,
    )
