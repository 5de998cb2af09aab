"""The configuration models: one frozen pydantic model per YAML section.

Theory of operation
-------------------
One YAML file configures one daemon, which replicates one source database into one lake
path. ``AppConfig`` is the whole file; each section is a model with
``ConfigDict(frozen=True, extra="forbid")``, so a misspelt key is an error with its path
instead of a silently ignored setting. Defaults live here, in the ``Field`` declarations,
and nowhere else; ``config.docs`` renders these declarations (type, default,
``description``) into docs/configuration.md, so the descriptions are the reference
documentation. The layers below never see this module: ``daemon.wiring`` derives their
plain settings objects (``SinkSettings``, ``SparkSettings``, ``CaptureSettings``) from a
validated ``AppConfig``, and those objects carry no defaults of their own for anything
configured here (tests and benchmarks build theirs through ``daemon.wiring`` too). The
names of the metadata columns a user cannot rename (``ORDINAL_COLUMN``, ...) are defined
here as well, beside the ``sink.metadata`` defaults, so that every metadata column name
has one definition.

Validation happens in three layers, all inside pydantic so that ``config.load`` can report
every problem of a file at once with its field path:

1. Field types: annotated types for durations, sizes and PostgreSQL names
   (``config.units``, ``config.names``), ``Literal`` for closed sets.
2. ``@model_validator(mode="after")`` on a section for rules between its own fields
   (``password`` or ``password_file``; ``streaming: parallel`` needs protocol 4).
3. ``AppConfig``'s validator for rules across sections (``sink.keys`` must name a table
   of ``source.tables``).

A cross-field rule raises ``FieldRuleError`` with paths *relative to the model that
raised*, so the message lands on the field to fix (``source.tables.1.key``) rather than on
the section. Rules that need the server (does protocol 4 exist, is the table there) belong
to ``capture`` at startup, not here.

Secrets: ``source.password`` is a ``SecretStr``; ``repr`` and ``model_dump`` show the DSN
through ``redact_dsn`` and mask Spark settings whose names look like credentials. The
password file is read once at validation (so a missing file is a config error) and again
by ``SourceConfig.conninfo()`` on every connect, so a rotated Kubernetes secret is picked
up on the next reconnect without a restart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    WithJsonSchema,
    field_serializer,
    field_validator,
    model_validator,
)

from config.dsn import REDACTED, redact_dsn, redact_spark_url
from config.errors import ConfigError
from config.names import (
    check_identifier,
    check_slot_name,
    format_table_name,
    normalize_table_name,
    parse_table_name,
)
from config.units import ByteSize, Duration, NonNegativeDuration, TypeLabel, format_duration

ProtocolVersion = Literal["auto", 1, 2, 3, 4]
StreamingMode = Literal["auto", "off", "on", "parallel"]
OriginFilter = Literal["any", "none"]
MissingKeyPolicy = Literal["error", "skip"]
SnapshotMode = Literal["initial", "never"]
SlotLossPolicy = Literal["stop", "resync"]
FailoverMode = Literal["auto", "true", "false"]
SparkMode = Literal["embedded", "connect", "classic"]
MessagesMode = Literal["ignore", "table"]
ColumnNamePolicy = Literal["error", "map"]
UnrepresentablePolicy = Literal["keep", "stop"]
ColumnTypeOverride = Literal["string", "double"]
SnapshotWriter = Literal["auto", "spark", "delta-rs"]
LogFormat = Literal["auto", "json", "console"]
LogLevel = Literal["debug", "info", "warning", "error", "critical"]

#: Table that receives logical decoding messages when ``sink.messages`` is ``table``.
#: These two table names and the vocabularies above repeat ``sink/constants.py`` (config
#: imports nothing of the project); ``tests/unit/sink/test_constants.py`` pins them.
MESSAGES_TABLE: Final = "_wal2delta_messages"
REJECTS_TABLE: Final = "_wal2delta_rejects"

#: Metadata columns whose names are not configurable (``MetadataConfig`` names the
#: others); ``daemon.wiring.sink_settings`` hands them to the sink with those. The ordinal
#: column holds the position in its transaction of the change that last wrote the row
#: (with the LSN column, the row's stamp); the row LSN and row ordinal columns are the
#: hidden identity of the rows of a table without any key under REPLICA IDENTITY FULL.
ORDINAL_COLUMN: Final = "_wal2delta_ordinal"
ROW_LSN_COLUMN: Final = "_wal2delta_row_lsn"
ROW_ORDINAL_COLUMN: Final = "_wal2delta_row_ordinal"

#: The oldest protocol version that carries each feature (logicalproto.h).
_MIN_PROTOCOL_FOR_STREAMING: Final = 2
_MIN_PROTOCOL_FOR_TWO_PHASE: Final = 3
_MIN_PROTOCOL_FOR_PARALLEL: Final = 4

# Spark settings that carry credentials (s3a secret keys, Azure account keys, tokens)
# are masked in repr and dumps like the password.
_SECRET_CONF_KEY: Final = re.compile(r"secret|password|token|credential|\.key$", re.IGNORECASE)

Location = tuple[str | int, ...]


class FieldRuleError(ValueError):
    """Problems found by a model validator, each at a path relative to that model.

    ``config.load`` appends each relative path to the location pydantic reports for the
    model, so the message names the field to fix.
    """

    def __init__(self, problems: Iterable[tuple[Location, str]]) -> None:
        self.problems: list[tuple[Location, str]] = list(problems)
        super().__init__("; ".join(message for _, message in self.problems))


def _raise_problems(problems: list[tuple[Location, str]]) -> None:
    if problems:
        raise FieldRuleError(problems)


def _column_name(value: str) -> str:
    return check_identifier(value, what="column name")


def _column_list(columns: tuple[str, ...]) -> tuple[str, ...]:
    if not columns:
        raise ValueError("must list at least one column")
    seen: set[str] = set()
    for column in columns:
        if column in seen:
            raise ValueError(f"column {column!r} is listed twice")
        seen.add(column)
    return columns


def _strip_required(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


ColumnName = Annotated[str, AfterValidator(_column_name), TypeLabel("column name")]
ColumnList = Annotated[tuple[ColumnName, ...], AfterValidator(_column_list)]
TableName = Annotated[str, AfterValidator(normalize_table_name), TypeLabel("table name")]
NonEmptyStr = Annotated[str, AfterValidator(_strip_required)]


class _Section(BaseModel):
    """Common settings of every configuration model."""

    # Numbers become strings where a string is expected (a slot named 2024 in YAML) so
    # that quoting is not needed for names that happen to look numeric.
    model_config = ConfigDict(
        frozen=True, extra="forbid", coerce_numbers_to_str=True, validate_default=False
    )


class TableConfig(_Section):
    """One published table, with optional row filter, column list and key."""

    name: TableName = Field(
        description=(
            "Table as `schema.table`, or `table` for schema `public`. Exact, case-sensitive "
            "catalog names; put a part in double quotes when it contains a dot. Normalised "
            "to `schema.table`."
        ),
    )
    where: NonEmptyStr | None = Field(
        default=None,
        description=(
            "Row filter for the publication (`CREATE PUBLICATION ... WHERE (...)`, "
            "PostgreSQL 15+). Only used when wal2delta creates the publication."
        ),
    )
    columns: ColumnList | None = Field(
        default=None,
        description=(
            "Column list for the publication (PostgreSQL 15+); all columns when null. "
            "Must include the key columns. A column left out later (or dropped in "
            "PostgreSQL) stays in Delta, as in a native subscriber's table: rows updated "
            "afterwards keep its last value, rows inserted afterwards hold NULL."
        ),
    )
    key: ColumnList | None = Field(
        default=None,
        description=(
            "Key columns used to MERGE into Delta when the table has no replica identity "
            "key (REPLICA IDENTITY FULL). Null uses the replica identity or primary key."
        ),
    )

    @property
    def schema_name(self) -> str:
        """The exact schema name."""
        return parse_table_name(self.name)[0]

    @property
    def table_name(self) -> str:
        """The exact table name."""
        return parse_table_name(self.name)[1]

    @property
    def qualified_name(self) -> str:
        """``schema.table``, the form used in metric labels and ``sink.keys``."""
        return self.name

    @model_validator(mode="after")
    def _key_is_published(self) -> Self:
        if self.columns is not None and self.key is not None:
            missing = [column for column in self.key if column not in self.columns]
            if missing:
                raise FieldRuleError(
                    [(("key",), f"key columns {missing} are not in columns; publish them too")]
                )
        return self


def _table_from_text(value: object) -> object:
    """Accept ``public.orders`` as shorthand for ``{name: public.orders}``."""
    return {"name": value} if isinstance(value, str) else value


TableEntry = Annotated[TableConfig, BeforeValidator(_table_from_text)]


def _publications_from_text(value: object) -> object:
    """Accept one publication name as shorthand for a list of one."""
    return (value,) if isinstance(value, str) else value


def _publication_names(names: tuple[str, ...]) -> tuple[str, ...]:
    if not names:
        raise ValueError("name at least one publication")
    for name in names:
        check_identifier(name, what="publication name")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"publication {repeated[0]!r} is listed twice")
    return names


#: One publication name or several, as a subscription's ``publication_names``; always a
#: tuple once validated.
PublicationNames = Annotated[
    tuple[str, ...],
    BeforeValidator(_publications_from_text),
    AfterValidator(_publication_names),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
            ]
        }
    ),
    TypeLabel("publication name or list of them"),
]


class BackoffConfig(_Section):
    """Exponential backoff with jitter: a first delay that doubles up to a bound, and how
    many failures in a row end the retries (``source.reconnect``, ``sink.store_retries``)."""

    initial_delay: Duration
    max_delay: Duration
    max_attempts: int

    @model_validator(mode="after")
    def _delays_ordered(self) -> Self:
        if self.max_delay < self.initial_delay:
            raise FieldRuleError(
                [(("max_delay",), "must be at least initial_delay")],
            )
        return self


class StoreRetriesConfig(BackoffConfig):
    """Retries of a batch the object store failed: throttling, 5xx, timeouts, resets.

    Decision 0115: the supervisor applies the batch again from the acknowledged position.
    """

    max_attempts: int = Field(
        default=10,
        ge=0,
        description=(
            "Store failures in a row (no batch durable in between) after which the error "
            "is terminal and the daemon exits naming the store's error; 0 retries forever."
        ),
    )
    initial_delay: Duration = Field(
        default=timedelta(seconds=1),
        description="Delay before the first retry of a batch the store failed.",
    )
    max_delay: Duration = Field(
        default=timedelta(seconds=30),
        description="Upper bound of the delay, which doubles after each store failure in a row.",
    )


class ReconnectConfig(BackoffConfig):
    """Backoff between attempts to re-establish the replication connection."""

    initial_delay: Duration = Field(
        default=timedelta(seconds=1), description="Delay before the first reconnect attempt."
    )
    max_delay: Duration = Field(
        default=timedelta(seconds=60),
        description="Upper bound of the delay, which doubles after each failed attempt.",
    )
    max_attempts: int = Field(
        default=0,
        ge=0,
        description=(
            "Failed attempts in a row before the daemon exits with an error; 0 retries forever."
        ),
    )


class HeartbeatConfig(_Section):
    """Periodic write on the source so an idle database still lets the slot advance."""

    interval: Duration | None = Field(
        default=None,
        description=(
            "How often to run `statement` on a normal connection; null disables it. A "
            "little WAL written in the source database now and then helps the slot of a "
            "long-idle database advance, and proves the path end to end."
        ),
    )
    statement: NonEmptyStr | None = Field(
        default=None,
        description=(
            "SQL to run, e.g. `SELECT pg_logical_emit_message(false, 'wal2delta_heartbeat', "
            "'')`. Required when `interval` is set."
        ),
    )

    @model_validator(mode="after")
    def _both_or_neither(self) -> Self:
        if self.interval is not None and self.statement is None:
            raise FieldRuleError(
                [
                    (
                        ("statement",),
                        'required when interval is set, for example "SELECT '
                        "pg_logical_emit_message(false, 'wal2delta_heartbeat', '')\"",
                    )
                ]
            )
        if self.statement is not None and self.interval is None:
            raise FieldRuleError([(("interval",), "required when statement is set")])
        return self


def _protocol_version(value: object) -> object:
    """Let ``"2"`` (from an environment variable) mean protocol 2."""
    if isinstance(value, str):
        text = value.strip().lower()
        return int(text) if text.isdigit() else text
    return value


def _streaming_mode(value: object) -> object:
    """Undo YAML 1.1, which reads unquoted ``on`` and ``off`` as booleans."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return value


def _read_password_file(path: Path) -> SecretStr:
    """Read a password file: the whole content with surrounding whitespace stripped."""
    try:
        content = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise ValueError(f"file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"{str(path)!r} is a directory, not a file") from None
    except PermissionError:
        raise ValueError(f"file {str(path)!r} is not readable by this user") from None
    except UnicodeDecodeError:
        raise ValueError(f"file {str(path)!r} is not UTF-8 text") from None
    except OSError as exc:
        raise ValueError(f"cannot read {str(path)!r}: {exc.strerror}") from None
    if not content:
        raise ValueError(f"file {str(path)!r} is empty")
    return SecretStr(content)


def _failover_mode(value: object) -> object:
    """YAML reads `true`/`false` as booleans; the setting also takes `auto`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


class SourceConfig(_Section):
    """The source database, its replication slot and publication, and protocol options."""

    dsn: str = Field(
        description=(
            "libpq connection string (`host=... dbname=... user=...`) or `postgresql://` "
            "URI of the source database. Keep the password out of it; use `password` or "
            "`password_file`. Shown redacted everywhere."
        ),
    )
    password: SecretStr | None = Field(
        default=None,
        description=(
            "Password, usually `${PGPASSWORD}` from the environment. Never logged or "
            "dumped. Mutually exclusive with `password_file`."
        ),
    )
    password_file: Path | None = Field(
        default=None,
        description=(
            "File whose content (surrounding whitespace stripped) is the password, e.g. a "
            "mounted Kubernetes secret. Re-read on every connect, so rotation needs no "
            "restart. Relative paths start at the working directory."
        ),
    )
    slot: str = Field(
        description=(
            "Logical replication slot name: 1 to 63 of `a-z`, `0-9`, `_`. One slot per "
            "daemon; two daemons on one slot fail with exit code 3."
        ),
    )
    publication: PublicationNames = Field(
        description=(
            "Publication name (exact, at most 63 bytes), or a list of them as in `CREATE "
            "SUBSCRIPTION ... PUBLICATION a, b`. With several, the server streams every "
            "table any of them publishes, a row when any of their row filters lets it "
            "through (no filter when one of them has none), and the snapshot copies the "
            "same; PostgreSQL refuses different column lists for one table. Only one "
            "when `create_publication` is true."
        ),
    )
    create_slot: bool = Field(
        default=True,
        description="Create the slot (pgoutput) at startup when it does not exist.",
    )
    failover: Annotated[FailoverMode, BeforeValidator(_failover_mode)] = Field(
        default="auto",
        description=(
            "Create the slot as a failover slot (`failover = true`, PostgreSQL 17 and "
            "newer), so a standby with `sync_replication_slots` keeps a copy and the daemon "
            "continues from it after a promotion (give `dsn` every host with "
            "`target_session_attrs=read-write`). `auto`: on for PostgreSQL 17 and newer; "
            "`true` on an older server is an error."
        ),
    )
    create_publication: bool = Field(
        default=True,
        description=(
            "Create the publication `FOR TABLE` the listed `tables` at startup when it does "
            "not exist. When false, the publications must exist and `tables` may be empty: "
            "what lands in Delta (and what the initial snapshot copies) is every table "
            "they publish, `FOR ALL TABLES` and `TABLES IN SCHEMA` included."
        ),
    )
    tables: tuple[TableEntry, ...] = Field(
        default=(),
        description=(
            "Tables to publish: `schema.table` strings or objects with `name`, `where`, "
            "`columns`, `key`. At least one when `create_publication` is true; no "
            "duplicates."
        ),
    )
    publish_via_partition_root: bool = Field(
        default=False,
        description=(
            "Publish changes of partitions as changes of their root table (one Delta table "
            "per partitioned table)."
        ),
    )
    protocol_version: Annotated[ProtocolVersion, BeforeValidator(_protocol_version)] = Field(
        default="auto",
        description=(
            "pgoutput protocol version. `auto` picks the highest the server supports "
            "(2 on PG14, 3 on PG15, 4 on PG16+)."
        ),
    )
    streaming: Annotated[StreamingMode, BeforeValidator(_streaming_mode)] = Field(
        default="auto",
        description=(
            "Receive large in-progress transactions before they commit (spooled locally, "
            "applied at commit). `auto` uses the best the protocol allows; `on` needs "
            "protocol 2+, `parallel` protocol 4."
        ),
    )
    two_phase: bool = Field(
        default=False,
        description=(
            "Decode prepared transactions at PREPARE (protocol 3+). They reach Delta only "
            "at COMMIT PREPARED and hold back the acknowledged LSN until then."
        ),
    )
    binary: bool = Field(
        default=False,
        description=(
            "Ask the server for binary column values instead of text. Delta holds the same "
            "values in both modes: enums, domains, composites, ranges and arrays of them "
            "are printed as PostgreSQL's text form, their layout read from the source "
            "catalog. A column whose type has no known binary layout (an extension base "
            "type such as citext or hstore, money, the reg* types) stops the daemon naming "
            "table, column and type; a source with such columns needs `binary: false`."
        ),
    )
    messages: bool = Field(
        default=False,
        description="Receive `pg_logical_emit_message` messages (see `sink.messages`).",
    )
    origin: OriginFilter = Field(
        default="any",
        description=(
            "`none` skips changes that were themselves replicated into the source "
            "(PostgreSQL 16+); `any` takes all."
        ),
    )
    on_missing_key: MissingKeyPolicy = Field(
        default="error",
        description=(
            "What to do with an UPDATE or DELETE on a table without any key (REPLICA "
            "IDENTITY NOTHING): `error` stops the daemon, `skip` drops the change."
        ),
    )
    status_interval: Duration = Field(
        default=timedelta(seconds=10),
        description=(
            "Longest time between standby status updates to the server "
            "(like `wal_receiver_status_interval`)."
        ),
    )
    connect_timeout: Duration = Field(
        default=timedelta(seconds=10),
        description="Timeout for establishing a connection to the source.",
    )
    receive_timeout: NonNegativeDuration = Field(
        default=timedelta(seconds=60),
        description=(
            "End the replication connection and reconnect when the server sent nothing for "
            "this long, as a subscriber's `wal_receiver_timeout` does; after half of it the "
            "daemon asks the server for a reply. Catches a network that went silent (a "
            "dropped NAT or firewall entry, a hung peer). 0 disables."
        ),
    )
    reconnect: ReconnectConfig = Field(
        default_factory=ReconnectConfig,
        description="Backoff after the replication connection is lost.",
    )
    heartbeat: HeartbeatConfig = Field(
        default_factory=HeartbeatConfig,
        description="Optional periodic write so an idle source lets the slot advance.",
    )

    @field_validator("dsn")
    @classmethod
    def _dsn_parses(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        try:
            conninfo_to_dict(value)
        except psycopg.Error as exc:
            # libpq quotes the offending fragment, which may be part of a password.
            reason = "" if _may_hold_password(value) else f" ({exc})"
            raise ValueError(
                "is not a valid libpq key=value connection string or postgresql:// URI"
                f"{reason}; quote values that contain spaces"
            ) from None
        return value

    @field_validator("slot")
    @classmethod
    def _slot_name(cls, value: str) -> str:
        return check_slot_name(value)

    @field_validator("password_file")
    @classmethod
    def _password_file_readable(cls, value: Path | None) -> Path | None:
        if value is not None:
            _read_password_file(value)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        problems: list[tuple[Location, str]] = []
        if self.password is not None and self.password_file is not None:
            problems.append((("password_file",), "set either password or password_file, not both"))
        if (self.password is not None or self.password_file is not None) and _dsn_password(
            self.dsn
        ):
            problems.append(
                (("dsn",), "contains a password and password/password_file is also set; keep one")
            )
        if self.create_publication and len(self.publication) > 1:
            problems.append(
                (
                    ("publication",),
                    "create_publication is true but several publications are named; "
                    "wal2delta creates one publication. Name one, or create them yourself "
                    "and set create_publication: false",
                )
            )
        if self.create_publication and not self.tables:
            problems.append(
                (
                    ("tables",),
                    "list at least one table: create_publication is true and the publication "
                    "is created FOR TABLE the listed tables",
                )
            )
        first_seen: dict[str, int] = {}
        for index, table in enumerate(self.tables):
            if table.name in first_seen:
                problems.append(
                    (
                        ("tables", index, "name"),
                        f"{table.name} is already listed as tables.{first_seen[table.name]}",
                    )
                )
            else:
                first_seen[table.name] = index
        problems.extend(self._protocol_problems())
        _raise_problems(problems)
        return self

    def _protocol_problems(self) -> Iterator[tuple[Location, str]]:
        version = self.protocol_version
        if version == "auto":
            return
        if self.streaming == "on" and version < _MIN_PROTOCOL_FOR_STREAMING:
            yield (("streaming",), f"'on' needs protocol_version 2 or later, not {version}")
        if self.streaming == "parallel" and version < _MIN_PROTOCOL_FOR_PARALLEL:
            yield (("streaming",), f"'parallel' needs protocol_version 4, not {version}")
        if self.two_phase and version < _MIN_PROTOCOL_FOR_TWO_PHASE:
            yield (("two_phase",), f"needs protocol_version 3 or later, not {version}")

    @field_serializer("dsn")
    def _dump_dsn(self, value: str) -> str:
        return redact_dsn(value)

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield (name, redact_dsn(value) if name == "dsn" else value)

    def resolved_password(self) -> SecretStr | None:
        """The password to connect with: ``password``, or the current content of ``password_file``.

        Returns:
            The secret, or ``None`` when neither is set (the DSN, ``.pgpass`` or a
            trust/cert method authenticates).

        Raises:
            ConfigError: the password file can no longer be read.
        """
        if self.password_file is None:
            return self.password
        try:
            return _read_password_file(self.password_file)
        except ValueError as exc:
            raise ConfigError([("source.password_file", str(exc))]) from None

    def conninfo(self) -> str:
        """The DSN with the password merged in, ready for ``psycopg.connect``.

        Returns:
            A libpq connection string. It contains the password: never log it (log
            ``redact_dsn(source.dsn)`` instead).

        Raises:
            ConfigError: the password file can no longer be read.
        """
        password = self.resolved_password()
        if password is None:
            return self.dsn
        return make_conninfo(self.dsn, password=password.get_secret_value())


def _dsn_password(dsn: str) -> bool:
    """Whether the DSN itself carries a password."""
    return bool(conninfo_to_dict(dsn).get("password"))


def _may_hold_password(dsn: str) -> bool:
    """Whether text that libpq could not parse might contain a password."""
    return "password" in dsn or redact_dsn(dsn) != dsn


class SnapshotConfig(_Section):
    """Initial copy of the existing rows, taken when the slot is created."""

    mode: SnapshotMode = Field(
        default="never",
        description=(
            "`initial` copies the tables' current rows from the snapshot exported when the "
            "slot is created, then streams changes from that point; `never` streams changes "
            "only."
        ),
    )
    on_slot_loss: SlotLossPolicy = Field(
        default="stop",
        description=(
            "A slot that is missing, invalidated (`max_slot_wal_keep_size`) or that the "
            "server cannot decode, or a lake that holds changes a promoted server never "
            "received (a failover without `synchronized_standby_slots`): `stop` stops the "
            "daemon (exit 1) naming it; `resync` creates a new slot (keeps the slot, for a "
            "lake ahead of the server) and copies every table again while streaming, each "
            "Delta table switching from its old content to the copy in one commit."
        ),
    )
    new_tables_interval: Duration = Field(
        default=timedelta(seconds=30),
        description=(
            "With `mode: initial`, how often the daemon looks for tables that joined the "
            "publications (`ALTER PUBLICATION ... ADD TABLE`, `FOR ALL TABLES`, `TABLES IN "
            "SCHEMA`) and copies them while streaming."
        ),
    )
    parallelism: int = Field(
        default=1,
        ge=1,
        le=64,
        description=(
            "Connections copying at the same time, each in the exported snapshot: several "
            "tables at once, and a large table in ranges of pages (PostgreSQL 14 and newer)."
        ),
    )
    chunk_size: ByteSize = Field(
        default=32 * 1024**2,
        ge=64 * 1024,
        description=(
            "COPY output read and appended to Delta at a time, per connection: memory "
            "grows with it and with `parallelism`, never with the table. "
            "`32MiB`, `100MB` (SI, 1000-based) or a number of bytes."
        ),
    )
    writer: SnapshotWriter = Field(
        default="auto",
        description=(
            "Who appends the copied rows to Delta. `delta-rs` writes them from the daemon "
            "(Rust, no round trip through the Spark engine; it reaches the lake with the "
            "credentials of the daemon's environment, as the commit log and `wal2delta "
            "status` do); `spark` sends them to the Spark engine; `auto` uses delta-rs "
            "and lets the engine write any table delta-rs refuses. The engine creates "
            "and truncates the tables and applies every streamed change either way."
        ),
    )


def _conf_value(value: object) -> object:
    """Spark settings are strings; YAML gives booleans and numbers for many of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _parallelism(value: object) -> object:
    """``auto`` or a whole number of at least 1 (one message for both forms)."""
    if value == "auto" or (type(value) is int and value >= 1):
        return value
    raise ValueError("must be 'auto' or a whole number of at least 1")


class SparkConfig(_Section):
    """Which Spark engine applies the MERGEs."""

    mode: SparkMode = Field(
        default="embedded",
        description=(
            "`embedded` starts a Sail Spark Connect server inside the process; `connect` "
            "uses a remote Spark Connect server at `url`; `classic` starts a local JVM with "
            "the delta-spark jars (image built with `WITH_JRE=true`)."
        ),
    )
    url: str | None = Field(
        default=None,
        description="Spark Connect URL (`sc://host:15002`), required when mode is `connect`.",
    )
    conf: dict[str, Annotated[str, BeforeValidator(_conf_value)]] = Field(
        default_factory=dict,
        description=(
            "Extra Spark session settings (`spark.sql.shuffle.partitions: 4`). Values whose "
            "names look like credentials are masked in dumps."
        ),
    )
    parallelism: Annotated[Literal["auto"] | int, BeforeValidator(_parallelism)] = Field(
        default="auto",
        description=(
            "Partitions the embedded Sail engine splits a query into (its "
            "`execution.default_parallelism`). `auto` leaves one usable CPU core (cgroup "
            "limits count) to the daemon's capture and planning threads: cores - 1, at least "
            "1, unless the environment sets `SAIL_EXECUTION__DEFAULT_PARALLELISM`. Only for "
            "`embedded`; a `connect` or `classic` engine sizes its own."
        ),
    )
    call_timeout: NonNegativeDuration = Field(
        default=timedelta(minutes=10),
        description=(
            "Longest one call into the engine (a MERGE, an append, a read, starting or "
            "stopping the session) or into delta-rs (a snapshot append, adopting a copy, a "
            "compaction, a vacuum) may take. A call past it - a silent engine, a store "
            "request that never returns - ends the process with exit code 4 and nothing more "
            "acknowledged: the call cannot be cancelled for sure, and its supervisor "
            "(Kubernetes) restarts the daemon, which resumes from the slot's confirmed "
            "position. Keep it well above the longest MERGE. 0 disables."
        ),
    )

    @model_validator(mode="after")
    def _url_matches_mode(self) -> Self:
        if self.mode == "connect":
            if self.url is None:
                raise FieldRuleError([(("url",), "required when mode is 'connect'")])
            if not self.url.startswith("sc://"):
                raise FieldRuleError([(("url",), "must be a Spark Connect URL: sc://host:port")])
        elif self.url is not None:
            raise FieldRuleError(
                [(("url",), f"only used when mode is 'connect', not {self.mode!r}")]
            )
        if self.mode != "embedded" and self.parallelism != "auto":
            raise FieldRuleError(
                [(("parallelism",), f"only used when mode is 'embedded', not {self.mode!r}")]
            )
        return self

    @field_serializer("conf")
    def _dump_conf(self, value: dict[str, str]) -> dict[str, str]:
        return _masked_conf(value)

    @field_serializer("url")
    def _dump_url(self, value: str | None) -> str | None:
        return None if value is None else redact_spark_url(value)

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            if name == "conf":
                yield (name, _masked_conf(value))
            elif name == "url" and value is not None:
                yield (name, redact_spark_url(value))
            else:
                yield (name, value)


def _masked_conf(conf: Mapping[str, str]) -> dict[str, str]:
    return {key: REDACTED if _SECRET_CONF_KEY.search(key) else value for key, value in conf.items()}


class BatchConfig(_Section):
    """How committed transactions are grouped into one Delta MERGE per table."""

    max_rows: int = Field(
        default=10_000,
        ge=1,
        description=(
            "Close the batch when it holds this many changes. A larger transaction is split "
            "over several batches and acknowledged only after its last one."
        ),
    )
    max_age: Duration = Field(
        default=timedelta(seconds=1),
        description=(
            "Close the batch this long after its first change arrived, so quiet periods "
            "still reach Delta quickly."
        ),
    )
    close_when_idle: bool = Field(
        default=True,
        description=(
            "Group commit: hand the batch to the sink as soon as it holds a whole "
            "transaction and the sink has nothing to do, rather than waiting for `max_age`. "
            "While the sink works, the batch keeps growing. Lag is then about one MERGE "
            "time at low rates, and batches grow by themselves under load. A backlog the "
            "server already held when the daemon connected is read in batches that grow "
            "to `max_rows_ceiling` (after a first small one), each closing `max_age` after "
            "its last change, so each table is written once per batch, not once per idle "
            "moment of the sink."
        ),
    )
    max_rows_ceiling: int = Field(
        default=500_000,
        ge=1,
        description=(
            "Upper limit for the batch size when the daemon grows batches beyond `max_rows` "
            "to catch up with a backlog; at least `max_rows`."
        ),
    )
    max_bytes: ByteSize = Field(
        default=64 * 1024**2,
        description=(
            "Close the batch when its changes weigh this much in memory (their message "
            "bytes plus about 256 bytes each), before `max_rows` or `max_rows_ceiling`: "
            "wide rows then make smaller batches. Up to two batches are in memory at "
            "once (one being applied, the next filling or handed over when the sink is "
            "free)."
        ),
    )

    @model_validator(mode="after")
    def _ceiling_above_target(self) -> Self:
        if self.max_rows_ceiling < self.max_rows:
            raise FieldRuleError([(("max_rows_ceiling",), "must be at least max_rows")])
        return self


class MetadataConfig(_Section):
    """Names of the columns wal2delta adds to every Delta table."""

    lsn_column: ColumnName = Field(
        default="_wal2delta_lsn",
        description="Commit LSN of the change that wrote the row (bigint); guards replays.",
    )
    commit_time_column: ColumnName = Field(
        default="_wal2delta_commit_ts",
        description="Commit time of that transaction on the source (timestamp, UTC).",
    )
    deleted_column: ColumnName = Field(
        default="_wal2delta_deleted",
        description="Soft-delete flag (boolean), present only when `sink.soft_delete` is true.",
    )
    key_bucket_column: ColumnName = Field(
        default="_wal2delta_key_bucket",
        description=(
            "Partition column (bigint, `floor(key / width)`) of the tables listed in "
            "`sink.partition_by_key`; absent elsewhere."
        ),
    )

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        names = {"lsn_column": self.lsn_column}
        problems: list[tuple[Location, str]] = []
        for field, value in (
            ("commit_time_column", self.commit_time_column),
            ("deleted_column", self.deleted_column),
            ("key_bucket_column", self.key_bucket_column),
        ):
            for other, other_value in names.items():
                if value == other_value:
                    problems.append(((field,), f"must differ from {other} ({value!r})"))
            names[field] = value
        _raise_problems(problems)
        return self


class KeyPartitioningConfig(_Section):
    """Partition one Delta table by ranges of an integer key column."""

    width: int = Field(
        ge=1,
        description=(
            "Keys per partition: a row lands in partition `floor(key / width)`. Aim for "
            "partitions of 100k-1M rows (a serial key of a 50M-row table: `1000000`)."
        ),
    )
    column: ColumnName | None = Field(
        default=None,
        description=(
            "The integer key column to partition by; null means the table's only key "
            "column. Required when the key has several columns."
        ),
    )


class SinkConfig(_Section):
    """The Delta Lake destination."""

    path: NonEmptyStr = Field(
        description=(
            "Lake root: a local path or a URI the engine can write (`s3://...`). Each table "
            "lands at `<path>/<schema>/<table>`; a character other than `A-Z a-z 0-9 _ - .` "
            "in a name is written `_xHHHH_` (`Sales EU` -> `Sales_x0020_EU`), as `status` "
            "shows. `<path>/_wal2delta_columns` records which source attribute (`attnum`) "
            "each Delta column holds, so a column dropped and added back under its name is "
            "told from a rename."
        ),
    )
    spark: SparkConfig = Field(default_factory=SparkConfig, description="Spark engine.")
    batch: BatchConfig = Field(default_factory=BatchConfig, description="Batching limits.")
    metadata: MetadataConfig = Field(
        default_factory=MetadataConfig, description="Names of the added metadata columns."
    )
    soft_delete: bool = Field(
        default=False,
        description=(
            "Keep deleted rows with `deleted_column` set to true instead of removing them."
        ),
    )
    messages: MessagesMode = Field(
        default="ignore",
        description=(
            f"`table` appends logical decoding messages to `<path>/{MESSAGES_TABLE}` "
            "(needs `source.messages: true`); `ignore` drops them."
        ),
    )
    keys: dict[TableName, ColumnList] = Field(
        default_factory=dict,
        description=(
            'Key columns per table, `{"public.t": [id]}`, for REPLICA IDENTITY FULL tables '
            "without a primary key. Same meaning as `key` in `source.tables`."
        ),
    )
    partition_by_key: dict[TableName, KeyPartitioningConfig] = Field(
        default_factory=dict,
        description=(
            'Key-range partitioning per table, `{"public.orders": {width: 1000000}}`. Each '
            "MERGE then reads only the partitions its rows fall in, so its cost follows "
            "the batch instead of the table's size. Set it before the table is first "
            "written: an existing Delta table cannot be repartitioned, and the width "
            "cannot change later."
        ),
    )
    history: bool | list[TableName] = Field(
        default=False,
        description=(
            "Change history next to the merged table: `true` (every table) or a list of "
            "tables (`[public.orders]`) whose every change - operation, commit LSN, "
            "ordinal, commit time, the new row, the old key or row when sent - is also "
            "appended, exactly once, to `<path>/<schema>/<table>__changes`."
        ),
    )
    compact_after_writes: int = Field(
        default=20,
        ge=0,
        description=(
            "Compact a Delta table's small files (delta-rs `optimize.compact`, a commit "
            "that changes no data) after this many writes to it: every MERGE adds files, "
            "and a MERGE reads every file of its table, so without compaction each one "
            "gets slower for as long as the daemon runs. Only partitions holding 8 small "
            "files (or this many, when fewer) are rewritten. Covers change histories and the "
            "commit log too. A table with deletion vectors whose files hold 1% or more "
            "deleted rows is purged instead (rewritten from its live rows). Old files stay "
            "for time travel until vacuumed (`retention`). `0` turns both off."
        ),
    )
    column_names: ColumnNamePolicy = Field(
        default="error",
        description=(
            "A column whose name Delta cannot hold (a space, one of `,;{}()=`, tab or "
            "newline): `error` stops the daemon naming it; `map` stores it under a "
            "reversible escaped name, each such character as `_xHHHH_` (`unit price` -> "
            "`unit_x0020_price`; an `_` that would read as an escape becomes `_x005F_`). "
            "Other names stay as they are; `wal2delta status` shows the map. Choose before "
            "the first such column is written."
        ),
    )
    on_unrepresentable: UnrepresentablePolicy | dict[TableName, UnrepresentablePolicy] = Field(
        default="keep",
        description=(
            "A legal value its Delta column cannot hold (`infinity` or a BC date in a DATE "
            "or TIMESTAMP, NaN in a `numeric(p,s)`, a multi-dimensional array or one whose "
            "lower bound is not 1): `keep` stores it under its documented convention "
            "(`infinity` -> `9999-12-31 23:59:59.999999`, `-infinity` -> `0001-01-01`, "
            "the rest NULL, an array's elements without the bound) and keeps its exact "
            f"text in `<path>/{REJECTS_TABLE}`; `stop` stops the daemon. Per table: "
            '`{"public.events": stop}` (tables not listed keep).'
        ),
    )
    concurrency: int = Field(
        default=4,
        ge=1,
        le=64,
        description=(
            "Tables of one batch whose MERGEs run at once (threads of one Spark Connect "
            "session). The batch is acknowledged only once every table's MERGE committed. "
            "More than the engine's cores helps little on the embedded engine (measured: 2 "
            "cores take about 1.5x the MERGEs per second of one at a time); a Sail or Spark "
            "cluster runs them on several workers."
        ),
    )
    table_min_rows: int = Field(
        default=0,
        ge=0,
        description=(
            "Let a table with fewer changes than this in a batch wait for later batches, up "
            "to `table_max_age`, so many tables that change a little make fewer Delta "
            "commits. The acknowledged LSN stays behind every waiting change, and a batch "
            "that leaves changes waiting is no consistent cut (`wal2delta cut`). `0` (the "
            "default) writes every table every batch."
        ),
    )
    table_max_age: Duration = Field(
        default=timedelta(seconds=5),
        description=(
            "How long a change held back by `table_min_rows` may wait: a batch that finds "
            "one older writes every waiting change and holds nothing back."
        ),
    )
    deletion_vectors: bool | list[TableName] = Field(
        default=False,
        description=(
            "Merge-on-read for large tables updated at random keys: `true` (every table) or "
            "a list (`[public.accounts]`). A MERGE then marks replaced rows in deletion "
            "vectors instead of rewriting their files, so its cost follows the batch, not "
            "the table. Readers need deletion-vector support (Spark 3.4+ with Delta 2.3+, "
            "Databricks, Sail, DuckDB's delta extension, delta-rs `QueryBuilder`; not "
            "delta-rs `to_pyarrow_table` or Polars' scanner). Set it before the table is "
            "first written; compaction purges the vectors."
        ),
    )
    retention: Duration | None = Field(
        default=None,
        description=(
            "Vacuum each table's files that no version of the last `retention` needs (and "
            "no version `wal2delta cut` can still name; `cut` refuses older boundaries), "
            "once per `retention / 4`, at most hourly, between batches. Null (the default) "
            "keeps every file for time travel, as before."
        ),
    )
    log_retention: Duration | None = Field(
        default=timedelta(minutes=1),
        description=(
            "Keep each table's Delta log for its newest 100 versions and the versions of the "
            "last `log_retention` (or `retention`, when longer), plus a minute; older "
            "commit files are deleted after a checkpoint, as Delta's own log cleanup does "
            "(`delta.logRetentionDuration`), once a minute per table, between batches. Time "
            "travel and `wal2delta cut` reach back that far. Every engine call lists the log, "
            "which costs time per file (7.5 us on a local lake), and the daemon commits busy "
            "tables several times a second. A table whose log outlived it also keeps its removed "
            "files' tombstones (`delta.deletedFileRetentionDuration`) only that long (or, with "
            "`retention`, until its vacuum has run). Null keeps the whole log."
        ),
    )
    store_retries: StoreRetriesConfig = Field(
        default_factory=StoreRetriesConfig,
        description=(
            "Retries after object-store faults (S3 `503 SlowDown`, 5xx, timeouts, resets) "
            "that outlast the store client's own quick retries: the batch is applied again "
            "from the acknowledged position, after a backoff with jitter."
        ),
    )
    column_types: dict[TableName, dict[ColumnName, ColumnTypeOverride]] = Field(
        default_factory=dict,
        description=(
            'Store columns as another type, `{"public.t": {valid_to: string}}`: `string` '
            "keeps PostgreSQL's text form of any type, exact for every value; `double` "
            "stores a `numeric` as the nearest double (NaN and infinities exact). "
            "`check-config` checks the names against the source. Choose before the column "
            "is first written: a table written under another choice is refused."
        ),
    )

    def unrepresentable_policies(
        self,
    ) -> tuple[UnrepresentablePolicy, dict[str, UnrepresentablePolicy]]:
        """``on_unrepresentable`` as (the policy of tables not named, per-table policies)."""
        if isinstance(self.on_unrepresentable, str):
            return self.on_unrepresentable, {}
        return "keep", dict(self.on_unrepresentable)


class SpoolConfig(_Section):
    """Local disk for transactions too large to hold in memory."""

    dir: Path | None = Field(
        default=None,
        description=(
            "Directory for spill files; null uses a fresh temporary directory. Put it on a "
            "volume with room for the largest transaction."
        ),
    )
    memory_limit: ByteSize = Field(
        default=8 * 1024**2,
        description=(
            "Bytes of in-progress transactions kept in memory, all of them together; past "
            "it, the transaction holding the most moves to a spill file on disk (the "
            "default keeps peak memory within 1.2x of an idle daemon's, `bench memory`). "
            "`64MiB`, `1GB` (SI, 1000-based), `512kB` or a number of bytes."
        ),
    )
    max_bytes: ByteSize | None = Field(
        default=None,
        description=(
            "Bytes all spill files may hold together; past it the daemon stops spooling "
            "with a clear error and reconnects with backoff (nothing is acknowledged), "
            "instead of filling the volume. Set it below the volume's size when the volume "
            "is shared. null bounds the spool by the volume only (a full volume gives the "
            "same error). Files left by an earlier process are removed at start."
        ),
    )


class MetricsConfig(_Section):
    """The HTTP endpoint for `/metrics`, `/healthz` and `/readyz`."""

    enabled: bool = Field(default=True, description="Serve the HTTP endpoint.")
    host: NonEmptyStr = Field(default="0.0.0.0", description="Address to listen on.")
    port: int = Field(default=9187, ge=1, le=65535, description="TCP port to listen on.")


class HealthConfig(_Section):
    """When the daemon reports itself not ready."""

    max_lag: Duration = Field(
        default=timedelta(minutes=5),
        description="`/readyz` fails when apply lag (now minus last applied commit) exceeds this.",
    )
    stall_timeout: NonNegativeDuration = Field(
        default=timedelta(minutes=15),
        description=(
            "`/healthz` and `/readyz` fail when work is pending (a batch handed to the sink, "
            "a transaction not yet durable) and the sink has been on the same batch or upkeep "
            "for this long (`wal2delta_sink_stalled_seconds`). Keep it above "
            "`sink.spark.call_timeout`, which ends a single stuck call sooner. 0 disables."
        ),
    )


class LoggingConfig(_Section):
    """Log output."""

    format: LogFormat = Field(
        default="auto",
        description=(
            "`json` (one object per line), `console` (key=value), or `auto`: console on a "
            "TTY, JSON otherwise."
        ),
    )
    level: Annotated[
        LogLevel, BeforeValidator(lambda v: v.lower() if isinstance(v, str) else v)
    ] = Field(default="info", description="Lowest level logged.")


class ShutdownConfig(_Section):
    """Graceful stop on SIGTERM."""

    grace_period: NonNegativeDuration = Field(
        default=timedelta(seconds=30),
        description=(
            "Time to finish applying received commits and send final feedback after "
            "SIGTERM. Keep it below the pod's terminationGracePeriodSeconds."
        ),
    )


class AppConfig(_Section):
    """A whole configuration file: one source database into one lake path."""

    source: SourceConfig = Field(description="The source database.")
    snapshot: SnapshotConfig = Field(
        default_factory=SnapshotConfig, description="Initial copy of existing rows."
    )
    sink: SinkConfig = Field(description="The Delta Lake destination.")
    spool: SpoolConfig = Field(default_factory=SpoolConfig, description="Spill to disk.")
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description="HTTP endpoint.")
    health: HealthConfig = Field(default_factory=HealthConfig, description="Readiness rule.")
    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="Logging.")
    shutdown: ShutdownConfig = Field(default_factory=ShutdownConfig, description="Stopping.")

    @model_validator(mode="after")
    def _sections_agree(self) -> Self:
        problems: list[tuple[Location, str]] = []
        listed = {table.name: table for table in self.source.tables}
        for name, key in self.sink.keys.items():
            table = listed.get(name)
            if listed and table is None:
                problems.append((("sink", "keys", name), f"{name} is not one of source.tables"))
            elif table is not None and table.key is not None and table.key != key:
                problems.append(
                    (
                        ("sink", "keys", name),
                        f"differs from the key given in source.tables for {name}; keep one",
                    )
                )
        for name in self.sink.partition_by_key:
            if listed and name not in listed:
                problems.append(
                    (("sink", "partition_by_key", name), f"{name} is not one of source.tables")
                )
        per_table = self.sink.on_unrepresentable
        for name in per_table if isinstance(per_table, dict) else ():
            if listed and name not in listed:
                problems.append(
                    (("sink", "on_unrepresentable", name), f"{name} is not one of source.tables")
                )
        for name in self.sink.column_types:
            if listed and name not in listed:
                problems.append(
                    (("sink", "column_types", name), f"{name} is not one of source.tables")
                )
        if isinstance(self.sink.history, list):
            for index, name in enumerate(self.sink.history):
                if listed and name not in listed:
                    problems.append(
                        (("sink", "history", index), f"{name} is not one of source.tables")
                    )
        stall = self.health.stall_timeout
        call = self.sink.spark.call_timeout
        if stall and call and stall <= call:
            problems.append(
                (
                    ("health", "stall_timeout"),
                    f"must be above sink.spark.call_timeout ({format_duration(call)}): a call "
                    "that deadline ends would otherwise fail the health check first, and the "
                    "pod would be restarted without the error that names the call",
                )
            )
        if self.sink.messages == "table" and not self.source.messages:
            problems.append(
                (
                    ("sink", "messages"),
                    "'table' needs source.messages: true, otherwise no messages arrive",
                )
            )
        _raise_problems(problems)
        return self

    def key_for(self, schema: str, table: str) -> tuple[str, ...] | None:
        """The configured MERGE key of a table, from ``source.tables`` or ``sink.keys``.

        Args:
            schema: exact schema name.
            table: exact table name.

        Returns:
            The key columns, or ``None`` when the configuration gives none (the daemon
            then uses the replica identity or primary key).
        """
        name = format_table_name(schema, table)
        for entry in self.source.tables:
            if entry.name == name and entry.key is not None:
                return entry.key
        return self.sink.keys.get(name)

    def describe(self) -> str:
        """One line for the startup log: slot, publication, redacted DSN, lake path.

        Returns:
            A human-readable summary without secrets.
        """
        return (
            f"slot={self.source.slot} publication={','.join(self.source.publication)} "
            f"dsn={redact_dsn(self.source.dsn)!r} sink={self.sink.path} "
            f"spark={self.sink.spark.mode} max_lag={format_duration(self.health.max_lag)}"
        )
