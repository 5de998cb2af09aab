"""Errors raised by the capture service, classified retryable or terminal.

psycopg errors are translated here, where they enter our code (``map_psycopg_errors``),
and chained with ``raise ... from`` so the original stays available.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

import psycopg
from psycopg import errors as pg_errors

from decoder import Wal2DeltaError

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_CONFIG = 2
EXIT_SLOT_IN_USE = 3


class CaptureError(Wal2DeltaError):
    """Something went wrong talking to the source PostgreSQL."""

    exit_code: ClassVar[int] = EXIT_FATAL


class ReplicationConnectionLostError(CaptureError):
    """The connection dropped or the server went away; reconnecting may help."""

    retryable: ClassVar[bool] = True


class SlotInUseError(CaptureError):
    """Another process streams from the slot; two consumers must never share one."""

    exit_code: ClassVar[int] = EXIT_SLOT_IN_USE


class SlotInvalidatedError(CaptureError):
    """The slot lost WAL it needs; data was lost on the server side and needs an operator."""


class SlotNotFoundError(CaptureError):
    """The slot does not exist and the configuration does not allow creating it."""


class ServerCapabilityError(CaptureError):
    """The server cannot do what the configuration asks (version, wal_level, options)."""

    exit_code: ClassVar[int] = EXIT_CONFIG


class PublicationError(CaptureError):
    """The publications are missing, or publish what cannot be replicated as asked."""

    exit_code: ClassVar[int] = EXIT_CONFIG


@contextmanager
def map_psycopg_errors(what: str) -> Iterator[None]:
    """Translate psycopg errors raised while doing ``what`` into capture errors."""
    try:
        yield
    except pg_errors.ObjectInUse as exc:
        raise SlotInUseError(f"{what}: {exc.diag.message_primary or exc}") from exc
    except (psycopg.OperationalError, pg_errors.AdminShutdown, pg_errors.ConnectionFailure) as exc:
        raise ReplicationConnectionLostError(f"{what}: connection to PostgreSQL lost") from exc
