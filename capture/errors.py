"""Errors raised by the capture service, classified retryable or terminal.

psycopg errors are translated here, where they enter our code (``map_psycopg_errors``),
and chained with ``raise ... from`` so the original stays available.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar, Final

import psycopg
from psycopg import errors as pg_errors

from capture.tls import certificate_problem
from decoder import Wal2DeltaError

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_CONFIG = 2
EXIT_SLOT_IN_USE = 3
EXIT_ENGINE_DEADLINE = 4
"""An engine or store call passed ``sink.spark.call_timeout`` (``sink/engine/deadline.py``);
the process ends at once, since the call cannot be cancelled for sure (decision 0114)."""


class CaptureError(Wal2DeltaError):
    """Something went wrong talking to the source PostgreSQL."""

    exit_code: ClassVar[int] = EXIT_FATAL


class ReplicationConnectionLostError(CaptureError):
    """The connection dropped or the server went away; reconnecting may help."""

    retryable: ClassVar[bool] = True


class ReceiveTimeoutError(ReplicationConnectionLostError):
    """The server sent nothing for ``source.receive_timeout``, a ping included: the network
    went silent (or the server hung) with the connection still open, so it is ended and a
    new one made, as PostgreSQL's apply worker does after ``wal_receiver_timeout``.

    Attributes:
        walsender_pid: the server process of the abandoned connection. Until the server
            notices the silence itself (``wal_sender_timeout``) it still holds the slot;
            the next session may end that process (``capture.startup.release_own_walsender``).
    """

    def __init__(self, message: str, *, walsender_pid: int | None) -> None:
        super().__init__(message)
        self.walsender_pid = walsender_pid


class StreamRewindError(CaptureError):
    """A table copied while streaming landed: the session ends, and a new one starts at
    once from the acknowledged position, so the changes dropped during the copy come
    again (``sink/copies/copies.py``). Not a failure: no backoff, no error counted."""

    retryable: ClassVar[bool] = True


class SourceRefusedError(CaptureError):
    """The server refused for a reason that may pass (no free slot or connection, a
    rejected password that may be rotated); retried with backoff, its reason reported.

    Attributes:
        reason: the SQLSTATE's condition name (``configuration_limit_exceeded``).
    """

    retryable: ClassVar[bool] = True

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class SlotInUseError(CaptureError):
    """Another process streams from the slot; two consumers must never share one."""

    exit_code: ClassVar[int] = EXIT_SLOT_IN_USE


class SlotInvalidatedError(CaptureError):
    """The slot lost WAL it needs; data was lost on the server side and needs an operator."""


class SlotNotFoundError(CaptureError):
    """The slot does not exist and the configuration does not allow creating it."""


class LakeAheadOfServerError(CaptureError):
    """The lake holds changes the server never had: it was written from a timeline that
    ended, on this server's history, before them (a failover to a standby that had not
    received them; ``capture/timeline.py``). Terminal unless ``snapshot.on_slot_loss:
    resync``, which copies every table again instead."""


class SlotUndecodableError(CaptureError):
    """The server's logical decoding fails on this slot's WAL, the same way every time.

    Reconnecting replays the same WAL from the slot's restart point into the same error,
    so this is not retried. Seen with PostgreSQL's own defect around slot creation
    (reproduced on 15 and 18): a catalog change (``TRUNCATE``, ``ALTER TABLE``) committed
    while the slot waited for older transactions to end can stay invisible to the historic
    snapshots of transactions decoded after the slot became consistent, and the server
    ends the stream with ``could not map filenumber ... to relation OID`` (``filenode``
    before 16).

    Attributes:
        server_message: the server's primary message.
    """

    def __init__(self, message: str, *, server_message: str) -> None:
        super().__init__(message)
        self.server_message = server_message


# The server's messages that mean its logical decoding cannot get past the slot's WAL.
_UNDECODABLE = re.compile(r"could not map (?:filenode|filenumber) \".*\" to relation OID")


def replication_stream_ended(server_message: str | None) -> CaptureError:
    """The error for a stream the server ended with ``server_message`` (None: no reason).

    A decoding failure that repeats on every attempt is a ``SlotUndecodableError``;
    anything else (shutdown, a lost connection, a dropped publication that may come
    back) is a lost connection, retried.
    """
    text = f"server ended the replication stream: {server_message or 'no reason given'}"
    if server_message is not None and _UNDECODABLE.search(server_message):
        return SlotUndecodableError(text, server_message=server_message)
    return ReplicationConnectionLostError(text)


class ServerCapabilityError(CaptureError):
    """The server cannot do what the configuration asks (version, wal_level, options)."""

    exit_code: ClassVar[int] = EXIT_CONFIG


class CertificateError(CaptureError):
    """TLS cannot be set up: the server's certificate does not verify (host name, CA,
    expiry), the root certificate or the client certificate/key cannot be read, or the
    server refused the client certificate. A new attempt meets the same certificate, so
    it is not retried (``capture.tls``; decision 0116)."""

    exit_code: ClassVar[int] = EXIT_CONFIG


class TableChangedSinceSnapshotError(CaptureError):
    """A table changed, between the moment a snapshot was exported and the moment its copy
    locked it, in a way that leaves the snapshot's rows unreadable: renamed or dropped, a
    column renamed or given another type, a key column dropped, or rewritten by an ``ALTER
    TABLE`` (which makes the table look empty to the older snapshot). The copy starts over
    in a new snapshot, as PostgreSQL's table sync does after its COPY fails: the initial
    snapshot with a new slot, an online copy after its retry delay (decision 0125)."""

    retryable: ClassVar[bool] = True


class PublicationError(CaptureError):
    """The publications are missing, or publish what cannot be replicated as asked."""

    exit_code: ClassVar[int] = EXIT_CONFIG


# Refusals worth retrying: they pass when another consumer lets go of a slot or connection,
# memory or disk is freed, or a rotated password reaches the password file.
_RETRYABLE_REFUSALS: Final = {
    "53000",  # insufficient_resources
    "53100",  # disk_full
    "53200",  # out_of_memory
    "53300",  # too_many_connections
    "53400",  # configuration_limit_exceeded: all replication slots / wal senders in use
    "28000",  # invalid_authorization_specification
    "28P01",  # invalid_password
}
# The server is going away or not there yet: a lost connection.
_CONNECTION_STATES: Final = ("08", "57P01", "57P02", "57P03")


def _server_says(exc: psycopg.Error) -> str:
    """The server's own message, hint and SQLSTATE, or psycopg's text without them."""
    diag = exc.diag
    primary = diag.message_primary
    if not primary:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = primary
    if diag.message_detail:
        text += f" ({diag.message_detail})"
    if diag.message_hint:
        text += f"; hint: {diag.message_hint}"
    return f"{text} [SQLSTATE {exc.sqlstate}]"


def _condition_name(exc: psycopg.Error) -> str:
    """``configuration_limit_exceeded`` for SQLSTATE 53400 (bounded, for a metric label)."""
    name = type(exc).__name__
    if name in {"OperationalError", "Error", "DatabaseError"}:
        return "connection_failure"
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")


@contextmanager
def map_psycopg_errors(what: str) -> Iterator[None]:
    """Translate psycopg errors raised while doing ``what`` into capture errors.

    Decided per SQLSTATE: a lost or refused connection and the refusals in
    ``_RETRYABLE_REFUSALS`` are retryable; any other operational error is terminal. Every
    message carries the server's own text and hint.
    """
    try:
        yield
    except pg_errors.ObjectInUse as exc:
        raise SlotInUseError(f"{what}: {exc.diag.message_primary or exc}") from exc
    except (psycopg.OperationalError, pg_errors.AdminShutdown, pg_errors.ConnectionFailure) as exc:
        sqlstate = exc.sqlstate
        problem = certificate_problem(exc) if sqlstate is None else None
        if problem is not None:
            raise CertificateError(f"{what}: {problem}") from exc
        if sqlstate is None or sqlstate.startswith(_CONNECTION_STATES):
            raise ReplicationConnectionLostError(
                f"{what}: connection to PostgreSQL lost: {_server_says(exc)}"
            ) from exc
        if sqlstate in _RETRYABLE_REFUSALS:
            raise SourceRefusedError(
                f"{what}: the server refused: {_server_says(exc)}", reason=_condition_name(exc)
            ) from exc
        raise CaptureError(f"{what}: {_server_says(exc)}") from exc
