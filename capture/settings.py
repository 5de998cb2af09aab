"""Plain settings of the replication layer, so ``capture`` never reads ``config``.

``daemon.wiring.capture_settings`` builds them from the validated configuration. They have
no defaults for what the configuration sets (its models in ``config/models.py`` are the one
place defaults live); only ``SnapshotTuning.reader``, which no configuration sets, has one.
Tests derive theirs from a configuration too (``tests/support/settings.py``). Durations are
seconds, sizes bytes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from capture.negotiation import ReplicationRequest
from capture.slots import PublishedTable

TEXT_FORM_SETTINGS: Final = {
    "TimeZone": "UTC",
    "DateStyle": "ISO",
    "IntervalStyle": "postgres",
    "extra_float_digits": "3",
    "lc_monetary": "C",
}
"""Session settings of every source connection: the output functions behind pgoutput's text
mode and the snapshot's COPY print in them, so a value stored as PostgreSQL's text form
(``interval``, ``tstzrange``, ``money``, a column stored as ``string``) reads alike whatever
the server's defaults, in text mode and binary mode (whose printer uses UTC), streamed or
copied."""


def with_text_form_settings(conninfo: str) -> str:
    """``conninfo`` with ``TEXT_FORM_SETTINGS`` appended to its ``options``."""
    params = conninfo_to_dict(conninfo)
    extra = " ".join(f"-c {name}={value}" for name, value in TEXT_FORM_SETTINGS.items())
    params["options"] = f"{params.get('options') or ''} {extra}".strip()
    return make_conninfo("", **params)


CONNECTION_DEFAULTS: Final = {
    "keepalives": "1",
    "keepalives_idle": "20",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    "tcp_user_timeout": "60000",
}
"""libpq parameters of every connection to the source unless its DSN names them: TCP
keepalives after 20 s of quiet, three probes 10 s apart, so an idle connection whose peer
vanished (a dropped NAT or firewall entry, a powered-off host) fails within about 50 s
instead of the kernel's two hours; and ``tcp_user_timeout`` (milliseconds), so data sent
into a dead peer fails within a minute instead of after some fifteen minutes of
retransmissions. They cannot catch a peer whose kernel still acknowledges but whose
process sends nothing; the replication loop's own ``receive_timeout`` does."""


def with_connection_defaults(conninfo: str, *, connect_timeout: float) -> str:
    """``conninfo`` with ``CONNECTION_DEFAULTS`` and ``connect_timeout`` (seconds, whole,
    at least 1) added where it does not name them itself: a value in the DSN wins.

    Works alike for key/value strings and ``postgresql://`` URIs (the result is key/value).
    """
    params = conninfo_to_dict(conninfo)
    defaults = {**CONNECTION_DEFAULTS, "connect_timeout": str(max(1, round(connect_timeout)))}
    for name, value in defaults.items():
        if params.get(name) in (None, ""):
            params[name] = value
    return make_conninfo("", **params)


@dataclass(frozen=True, slots=True)
class BatchSettings:
    """When the open batch is handed to the sink (``capture.batcher``)."""

    max_rows: int
    max_age: float
    max_rows_ceiling: int
    max_bytes: int
    close_when_idle: bool


@dataclass(frozen=True, slots=True)
class SnapshotTuning:
    """How the initial snapshot copies (``capture.snapshot``).

    Attributes:
        parallelism: connections copying at once, each in the exported snapshot.
        chunk_bytes: COPY output read and appended at a time, per connection.
        reader: ``adbc`` reads with the ADBC PostgreSQL driver (``capture.adbcreader``),
            ``csv`` with COPY csv and Arrow's parser (``capture.copyreader``); ``auto``:
            ADBC when it is installed. No configuration sets it, hence its default.
    """

    parallelism: int
    chunk_bytes: int
    reader: Literal["auto", "adbc", "csv"] = "auto"


@dataclass(frozen=True, slots=True)
class ReconnectSettings:
    """Backoff between sessions after a retryable error (``max_attempts`` 0: for ever)."""

    initial_delay: float
    max_delay: float
    max_attempts: int

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (1 for the first): the initial
        delay doubled per earlier attempt up to ``max_delay``, times a jitter of a half to
        one, so daemons that failed together do not retry together."""
        doubled = self.initial_delay * 2.0 ** min(max(attempt - 1, 0), 64)
        return min(doubled, self.max_delay) * (0.5 + random.random() / 2)


@dataclass(frozen=True, slots=True)
class CaptureSettings:
    """Everything the replication layer needs to stream one source database.

    Attributes:
        resolve_conninfo: returns the libpq connection string, password included, as it is
            now; read through ``conninfo`` by every new connection, so a rotated password
            file is used from the next connection on. Kept out of ``repr`` and equality,
            so the settings can be logged and shown in a traceback.
        slot: the logical replication slot.
        publications: the publication names, as a subscription's ``publication_names``.
        tables: the tables a created publication publishes (``create_publication``).
        create_publication: create or update the publication from ``tables``.
        publish_via_partition_root: the created publication's option of that name.
        create_slot: create the slot when it does not exist.
        request: the protocol options asked for (negotiated with the server version).
        connect_timeout: seconds to wait for a connection.
        receive_timeout: seconds without any message from the server after which the
            session ends the replication connection (a ping at half of it); 0 never.
        status_interval: seconds between standby status updates.
        initial_snapshot: copy the tables in the slot's exported snapshot first.
        snapshot: how the snapshot copies (parallelism, chunk size).
        batch: when batches close.
        spool_dir: where large transactions spill; None for a temporary directory.
        spool_memory_limit: bytes all open transactions may hold before spilling.
        spool_max_bytes: bytes all spill files may hold together; None for no bound but
            the volume's.
        shutdown_grace: seconds a stop request waits for committed work to be durable.
        failover: create the slot as a failover slot: ``auto`` (PostgreSQL 17 and newer),
            ``true`` or ``false`` (``source.failover``).
        on_slot_loss: a missing, invalidated or undecodable slot stops the daemon
            (``stop``) or is replaced and every table copied again online (``resync``).
        new_tables_interval: seconds between looks for tables that joined the
            publications (with ``initial_snapshot``).
    """

    resolve_conninfo: Callable[[], str] = field(repr=False, compare=False)
    slot: str
    publications: tuple[str, ...]
    tables: tuple[PublishedTable, ...]
    create_publication: bool
    publish_via_partition_root: bool
    create_slot: bool
    request: ReplicationRequest
    connect_timeout: float
    receive_timeout: float
    status_interval: float
    initial_snapshot: bool
    batch: BatchSettings
    spool_dir: Path | None
    spool_memory_limit: int
    spool_max_bytes: int | None
    shutdown_grace: float
    snapshot: SnapshotTuning
    failover: Literal["auto", "true", "false"]
    on_slot_loss: Literal["stop", "resync"]
    new_tables_interval: float

    @property
    def conninfo(self) -> str:
        """The connection string for a new connection, resolved now (password included:
        never log it).

        Raises:
            ValueError: the password can no longer be read (``config.ConfigError``).
        """
        return self.resolve_conninfo()
