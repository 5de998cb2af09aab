"""Start-up of a replication session: server checks, publication and slot, the snapshot.

``prepare_source`` runs before every session on a regular connection: it checks the
server, creates or checks the publication(s) and the slot, and negotiates the protocol.
The slot is a failover slot or not as ``source.failover`` says (``want_failover``): it is
created so, and an existing slot's flag is changed to match on a replication connection
(docs/decisions/0107-failover-slots.md).
``ensure_snapshot`` copies the tables in the snapshot a freshly created slot exports,
unless the sink's markers say this slot's snapshot completed (``capture.snapshot``).
``drop_undecodable_slot`` clears the way for a new slot and snapshot when the server cannot
decode the slot (``SlotUndecodableError``).

After a receive timeout (``ReceiveTimeoutError``: the network went silent) the walsender of
the abandoned connection may still hold the slot, until the server's own
``wal_sender_timeout`` ends it, and the slot would look used by another consumer.
``prepare_source`` then ends that one process - the exact PID the abandoned connection had,
and only while it is a ``wal2delta`` walsender holding our slot (``release_own_walsender``;
decision 0113). Any other holder is still a second consumer, refused as before
(``SlotInUseError``, exit code 3).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

import psycopg
import structlog

from capture.errors import (
    CaptureError,
    ReplicationConnectionLostError,
    SlotInvalidatedError,
    SlotNotFoundError,
    SlotUndecodableError,
    map_psycopg_errors,
)
from capture.metrics import Metrics
from capture.negotiation import negotiate
from capture.settings import CaptureSettings
from capture.slots import (
    SlotState,
    check_server,
    drop_slot,
    ensure_publication,
    ensure_slot,
    published_table_names,
    server_version,
    slot_state,
    wal_sender_timeout_seconds,
    want_failover,
)
from capture.snapshot import SnapshotCopier
from capture.stream import ReplicationStream
from decoder import Lsn, ProtocolOptions, format_lsn
from sink import Sink, SnapshotMarker, SnapshotMarkerStore, parts_of

log = structlog.get_logger("wal2delta.startup")


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """What start-up learned about the source."""

    options: ProtocolOptions
    wal_sender_timeout: float
    server_version: int
    slot_exists: bool
    failover: bool = False
    """The slot is to be a failover slot (``source.failover``, ``want_failover``)."""
    lost_slot_tables: tuple[str, ...] = ()
    """The slot was lost and replaced (``snapshot.on_slot_loss: resync``): every published
    table, to be copied again while streaming."""


@contextmanager
def admin_connection(
    settings: CaptureSettings, action: str
) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """An autocommit SQL connection to the source (``wal2delta-admin``); its errors are
    mapped as ``action`` (``map_psycopg_errors``)."""
    with (
        map_psycopg_errors(action),
        psycopg.connect(
            settings.conninfo,
            autocommit=True,
            connect_timeout=max(1, round(settings.connect_timeout)),
            application_name="wal2delta-admin",
        ) as conn,
    ):
        yield conn


RELEASE_TIMEOUT: Final = 10.0
"""Seconds ``release_own_walsender`` waits for the ended walsender to let the slot go."""

OWN_WALSENDER_NAME: Final = "wal2delta"
"""The ``application_name`` of the replication connection (``ReplicationStream.open``)."""


def release_own_walsender(
    conn: psycopg.Connection[tuple[object, ...]],
    slot: str,
    walsender_pid: int,
    *,
    timeout: float = RELEASE_TIMEOUT,
) -> None:
    """End ``walsender_pid`` - the server process of a replication connection this daemon
    gave up on (``ReceiveTimeoutError``) - if it still holds ``slot``.

    Nothing happens unless the slot is active for exactly that PID and the process is a
    walsender named ``wal2delta``: a slot held by anything else is left to ``ensure_slot``,
    which refuses a second consumer. ``pg_terminate_backend`` needs the same role as the
    walsender (ours) or ``pg_signal_backend``.

    Raises:
        ReplicationConnectionLostError: the process could not be ended, or still holds the
            slot after ``timeout`` seconds (retryable: the server's ``wal_sender_timeout``
            ends it in the end, and then the slot is free).
    """
    state = slot_state(conn, slot)
    if state is None or state.active_pid != walsender_pid:
        return
    row = conn.execute(
        "SELECT application_name, backend_type FROM pg_stat_activity WHERE pid = %s",
        (walsender_pid,),
    ).fetchone()
    if row is None or row[0] != OWN_WALSENDER_NAME or row[1] != "walsender":
        return
    log.warning(
        "ending the walsender of the abandoned replication connection",
        slot=slot,
        walsender_pid=walsender_pid,
        reason="it still holds the slot after the receive timeout",
    )
    try:
        conn.execute("SELECT pg_terminate_backend(%s)", (walsender_pid,))
    except psycopg.Error as exc:
        raise ReplicationConnectionLostError(
            f"replication slot {slot!r} is still held by PID {walsender_pid}, the walsender "
            f"of the connection given up after the receive timeout, which could not be "
            f"ended ({exc.diag.message_primary or type(exc).__name__}); the server ends it "
            "after its wal_sender_timeout"
        ) from exc
    deadline = time.monotonic() + timeout
    while state is not None and state.active_pid == walsender_pid:
        if time.monotonic() >= deadline:
            raise ReplicationConnectionLostError(
                f"replication slot {slot!r} is still held by PID {walsender_pid}, the "
                f"walsender of the connection given up after the receive timeout, "
                f"{timeout:g} s after it was told to end"
            )
        time.sleep(0.1)
        state = slot_state(conn, slot)


def prepare_source(
    settings: CaptureSettings,
    markers: SnapshotMarkerStore | None = None,
    *,
    abandoned_walsender: int | None = None,
) -> SourceInfo:
    """Check the server, create or update publication and slot, negotiate the protocol.

    ``abandoned_walsender``: the server process of the replication connection the last
    session gave up on (``ReceiveTimeoutError``), ended when it still holds the slot
    (``release_own_walsender``).

    With an initial snapshot a missing slot is left for the snapshot to create (it needs
    the replication connection to export its snapshot). A slot that the sink's markers say
    existed before but is gone now is an error: recreating it silently would skip every
    change made in between.
    """
    with admin_connection(settings, "connecting to the source") as conn:
        check_server(conn)
        version = server_version(conn)
        failover = want_failover(settings.failover, version)
        options = negotiate(settings.request, version)
        ensure_publication(
            conn,
            settings.publications,
            list(settings.tables),
            create=settings.create_publication,
            via_partition_root=settings.publish_via_partition_root,
        )
        slot = settings.slot
        if abandoned_walsender is not None:
            release_own_walsender(conn, slot, abandoned_walsender)
        existing = slot_state(conn, slot)
        marker = markers.load_snapshot_marker(slot) if markers is not None else None
        lost_tables: tuple[str, ...] = ()
        lost = _slot_loss(existing, marker)
        if lost is not None:
            lost_tables = _replace_lost_slot(conn, settings, lost, existing)
            existing = slot_state(conn, slot)
        if existing is not None or not settings.initial_snapshot:
            state = ensure_slot(
                conn,
                slot,
                create=settings.create_slot,
                two_phase=settings.request.two_phase,
                failover=failover,
            )
            _follow_failover_setting(settings, state, failover)
            if marker is None and markers is not None and not settings.initial_snapshot:
                # Remember the slot, so that a later drop of it is noticed.
                markers.save_snapshot_marker(
                    SnapshotMarker(slot=slot, status="complete", consistent_point=Lsn(0))
                )
        timeout = wal_sender_timeout_seconds(conn)
    return SourceInfo(
        options=options,
        wal_sender_timeout=timeout,
        server_version=version,
        slot_exists=existing is not None or not settings.initial_snapshot,
        failover=failover,
        lost_slot_tables=lost_tables,
    )


def _slot_loss(existing: SlotState | None, marker: SnapshotMarker | None) -> str | None:
    """How the slot was lost - ``dropped`` (the sink's marker says it streamed from it) or
    ``invalidated`` (``wal_status = lost``) - or None."""
    if existing is None:
        return "dropped" if marker is not None and marker.status == "complete" else None
    return "invalidated" if existing.wal_status == "lost" else None


def _replace_lost_slot(
    conn: psycopg.Connection[tuple[object, ...]],
    settings: CaptureSettings,
    how: str,
    existing: SlotState | None,
) -> tuple[str, ...]:
    """With ``snapshot.on_slot_loss: resync``: a new slot in place of the lost one; return
    every published table, each to be copied again while streaming. Otherwise stop.

    Raises:
        SlotNotFoundError, SlotInvalidatedError: ``on_slot_loss`` is ``stop``.
    """
    slot = settings.slot
    if settings.on_slot_loss != "resync":
        what = (
            "was dropped after wal2delta had streamed from it"
            if how == "dropped"
            else "was invalidated by the server (wal_status = lost): WAL it needed is gone"
        )
        error = SlotNotFoundError if how == "dropped" else SlotInvalidatedError
        raise error(
            f"Replication slot {slot!r} {what}; changes made since are lost to it. Set "
            "snapshot.on_slot_loss: resync to replace it and copy every table again while "
            "streaming, or restore the slot."
        )
    if existing is not None:
        drop_slot(conn, slot)
    ensure_slot(
        conn,
        slot,
        create=True,
        two_phase=settings.request.two_phase,
        failover=want_failover(settings.failover, server_version(conn)),
    )
    tables = published_table_names(conn, settings.publications)
    log.error(
        "replication slot lost; a new one streams and every table is copied again",
        slot=slot,
        how=how,
        tables=len(tables),
        consequence=(
            "each Delta table keeps its content until its copy replaces it in one commit; "
            "rows deleted at the source meanwhile are gone from the copy"
        ),
    )
    return tables


def _follow_failover_setting(settings: CaptureSettings, state: SlotState, failover: bool) -> None:
    """Change the slot's failover flag to ``failover`` when it differs (PostgreSQL 17+).

    A slot created before ``source.failover`` asked for it (or by hand) becomes a failover
    slot; ``false`` turns it off again, so that a standby named in
    ``synchronized_standby_slots`` no longer holds this slot's stream back. A refusal is
    logged, not raised: the slot still streams, only a failover would lose it.
    """
    if state.failover is None or state.failover == failover:
        return
    try:
        stream = ReplicationStream.open(settings.conninfo, connect_timeout=settings.connect_timeout)
        try:
            stream.alter_slot_failover(state.name, failover=failover)
        finally:
            stream.close()
    except CaptureError as exc:
        if exc.retryable:
            raise
        log.warning(
            "could not change the slot's failover flag; it streams as it is",
            slot=state.name,
            failover_wanted=failover,
            failover=state.failover,
            error=str(exc),
            consequence=(
                "a promoted standby will not have this slot"
                if failover
                else "standbys in synchronized_standby_slots still hold its stream back"
            ),
        )
        return
    log.info("replication slot failover flag changed", slot=state.name, failover=failover)


def ensure_snapshot(
    settings: CaptureSettings,
    stream: ReplicationStream,
    info: SourceInfo,
    sink: Sink,
    metrics: Metrics,
) -> Lsn | None:
    """Copy the tables unless this slot's snapshot already completed.

    Returns:
        The consistent point streaming continues from after a new snapshot; None when
        the slot's snapshot had completed before.
    """
    parts = parts_of(sink)
    markers = parts.markers
    if markers is None:
        raise CaptureError(
            "snapshot.mode: initial needs a sink that records snapshot progress; "
            "this sink does not."
        )
    slot = settings.slot
    marker = markers.load_snapshot_marker(slot)
    if info.slot_exists and marker is not None and marker.status == "complete":
        return None
    if info.slot_exists:
        log.warning("restarting an interrupted snapshot", slot=slot)
        with psycopg.connect(settings.conninfo, autocommit=True) as conn:
            drop_slot(conn, slot)
    markers.save_snapshot_marker(
        SnapshotMarker(slot=slot, status="in_progress", consistent_point=Lsn(0))
    )
    # Created without two-phase on purpose, as PostgreSQL's own subscriber does: the
    # START_REPLICATION that follows enables it with two_phase_at at the consistent
    # point, so a transaction prepared before the snapshot (invisible to the copy) is
    # sent whole at its COMMIT PREPARED. A slot created with two-phase would place
    # two_phase_at earlier and send only the COMMIT PREPARED of such a transaction.
    exported = stream.create_slot_with_snapshot(
        slot, two_phase=False, failover=info.failover, server_version_num=info.server_version
    )
    log.info("snapshot started", slot=slot, consistent_point=format_lsn(exported.consistent_point))
    copier = SnapshotCopier(
        settings.conninfo,
        settings.publications,
        apply=sink.apply,
        metrics=metrics,
        chunk_rows=settings.batch.max_rows,
        bulk=parts.bulk,
        tuning=settings.snapshot,
    )
    copier.run(exported)
    markers.save_snapshot_marker(
        SnapshotMarker(slot=slot, status="complete", consistent_point=exported.consistent_point)
    )
    return exported.consistent_point


def drop_undecodable_slot(
    settings: CaptureSettings,
    error: SlotUndecodableError,
    *,
    release_timeout: float = 30.0,
) -> None:
    """Drop a slot the server cannot decode, so that the next session copies the tables again.

    Such a slot is useless for good: every session replays the same WAL into the same
    error. With ``snapshot.on_slot_loss: resync`` it is treated like a dropped slot
    (``prepare_source``): a new slot streams and every table is copied again while
    streaming, and nothing past the lake's durable position was acknowledged. Otherwise the
    error is final, with what the operator can do.

    Raises:
        SlotUndecodableError: ``snapshot.on_slot_loss`` is not ``resync`` (terminal).
    """
    slot = settings.slot
    if settings.on_slot_loss != "resync":
        raise SlotUndecodableError(
            f"{error}. PostgreSQL cannot decode replication slot {slot!r} and fails the same "
            "way on every attempt, so wal2delta stops instead of retrying. Set "
            "snapshot.on_slot_loss: resync to have it replace the slot and copy every table "
            "again while streaming (it then does this on its own when it happens again).",
            server_message=error.server_message,
        )
    with (
        map_psycopg_errors(f"dropping undecodable slot {slot!r}"),
        psycopg.connect(settings.conninfo, autocommit=True) as conn,
    ):
        state = slot_state(conn, slot)
        deadline = time.monotonic() + release_timeout
        while state is not None and state.active_pid is not None and time.monotonic() < deadline:
            time.sleep(0.1)  # the walsender that failed is still exiting
            state = slot_state(conn, slot)
        log.error(
            "postgresql cannot decode the slot; dropping it to copy the tables again",
            slot=slot,
            server_message=error.server_message,
            restart_lsn=format_lsn(state.restart_lsn) if state and state.restart_lsn else None,
            confirmed_flush_lsn=(
                format_lsn(state.confirmed_flush_lsn)
                if state and state.confirmed_flush_lsn
                else None
            ),
            likely_cause=(
                "a catalog change (TRUNCATE, ALTER TABLE) committed while the slot was being "
                "created is missing from the server's historic snapshot (a PostgreSQL logical "
                "decoding defect)"
            ),
        )
        drop_slot(conn, slot)
