"""FlushTracker and FeedbackPolicy: what may be acknowledged, and when."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from capture.feedback import FeedbackPolicy, FlushTracker


def test_flush_stays_at_start_until_a_committed_transaction_is_durable() -> None:
    tracker = FlushTracker(100)
    tracker.on_commit(200)
    tracker.on_commit(300)
    assert tracker.positions(decoder_idle=True).flush == 100
    tracker.on_durable(200)
    assert tracker.positions(decoder_idle=True).flush == 200
    tracker.on_durable(300)
    assert tracker.positions(decoder_idle=True).flush == 300


def test_keepalive_wal_end_is_acknowledged_only_when_nothing_is_pending_and_decoder_idle() -> None:
    tracker = FlushTracker(100)
    tracker.on_commit(200)
    tracker.on_keepalive(500)
    assert tracker.positions(decoder_idle=True).flush == 100
    tracker.on_durable(200)
    assert tracker.positions(decoder_idle=False).flush == 200
    assert tracker.positions(decoder_idle=True).flush == 500


def test_unresolved_prepared_transaction_holds_flush_at_its_prepare_lsn() -> None:
    tracker = FlushTracker(100)
    tracker.on_prepared("gid1", 150)
    tracker.on_commit(200)
    tracker.on_durable(200)
    tracker.on_keepalive(400)
    assert tracker.positions(decoder_idle=True).flush == 150
    tracker.on_prepare_resolved("gid1")
    assert tracker.positions(decoder_idle=True).flush == 400


def test_a_committed_prepared_transaction_holds_flush_until_its_commit_is_durable() -> None:
    """Released at receipt, the server would resend only COMMIT PREPARED after a crash."""
    tracker = FlushTracker(100)
    tracker.on_prepared("gid1", 150)
    tracker.on_commit(200)  # another transaction, committed after the PREPARE
    tracker.on_prepare_resolved("gid1", commit_end_lsn=300)  # COMMIT PREPARED received
    tracker.on_commit(300)
    tracker.on_durable(200)
    tracker.on_keepalive(400)
    assert tracker.positions(decoder_idle=True).flush == 150
    tracker.on_durable(300)
    assert tracker.positions(decoder_idle=True).flush == 400


def test_a_rolled_back_prepared_transaction_releases_its_hold_at_once() -> None:
    tracker = FlushTracker(100)
    tracker.on_prepared("gid1", 150)
    tracker.on_prepare_resolved("gid1")
    tracker.on_keepalive(400)
    assert tracker.positions(decoder_idle=True).flush == 400


def test_write_position_reports_what_was_received() -> None:
    tracker = FlushTracker(0)
    tracker.on_data(1000)
    positions = tracker.positions(decoder_idle=False)
    assert positions.write == 1000
    assert positions.flush == 0


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("commit"), st.integers(1, 50)),
            st.tuples(st.just("durable"), st.integers(0, 60)),
            st.tuples(st.just("keepalive"), st.integers(0, 60)),
            st.tuples(st.just("poll"), st.booleans()),
        ),
        max_size=60,
    )
)
def test_flush_is_monotonic_and_never_passes_a_pending_commit(
    events: list[tuple[str, object]],
) -> None:
    tracker = FlushTracker(0)
    last_end = 0
    last_keepalive = 0
    pending: list[int] = []
    durable_upto = 0
    last_flush = 0
    for kind, value in events:
        assert isinstance(value, int | bool)
        if kind == "commit":
            # A commit sent after a keepalive ends after that keepalive's walEnd.
            last_end = max(last_end, last_keepalive) + int(value)
            tracker.on_commit(last_end)
            pending.append(last_end)
        elif kind == "durable":
            upto = min(int(value) * 10, last_end)
            tracker.on_durable(upto)
            durable_upto = max(durable_upto, upto)
            pending = [p for p in pending if p > durable_upto]
        elif kind == "keepalive":
            # The server never reports a walEnd before commits it already sent.
            last_keepalive = max(last_keepalive, last_end + int(value))
            tracker.on_keepalive(last_keepalive)
        else:
            flush = tracker.positions(decoder_idle=bool(value)).flush
            assert flush >= last_flush
            if pending:
                assert flush < pending[0]
            last_flush = flush


def test_policy_is_due_on_reply_request_on_flush_change_and_periodically() -> None:
    policy = FeedbackPolicy(status_interval=10, wal_sender_timeout=60)
    assert policy.due(0.0, 5)
    policy.sent(0.0, 5)
    assert not policy.due(1.0, 5)
    assert policy.due(1.0, 6)
    policy.request_reply()
    assert policy.due(1.0, 5)
    policy.sent(1.0, 5)
    assert not policy.due(10.9, 5)
    assert policy.due(11.0, 5)


def test_policy_replies_well_before_wal_sender_timeout() -> None:
    policy = FeedbackPolicy(status_interval=10, wal_sender_timeout=5)
    assert policy.interval == 3.0
    assert FeedbackPolicy(status_interval=10, wal_sender_timeout=0.01).interval == 0.1


def test_acknowledged_stays_behind_a_held_prepare_while_durable_passes_it() -> None:
    """What a reconnected session starts from (``Supervisor``): never past the PREPARE."""
    tracker = FlushTracker(100)
    tracker.on_prepared("g", 150)
    tracker.on_commit(200)
    tracker.on_durable(200)
    assert tracker.durable == 200
    assert tracker.positions(decoder_idle=True).flush == 150
    assert tracker.acknowledged == 150
    resumed = FlushTracker(tracker.acknowledged)
    assert resumed.positions(decoder_idle=True).flush == 150


def test_flush_never_lands_between_a_durable_prepare_and_its_commit_prepared() -> None:
    """Restarted there, the server would skip the PREPARE and send the COMMIT PREPARED alone.

    The crash harness caught it: a durable COMMIT PREPARED released its hold while another
    PREPARE still held the flush position, which then fell between the two records.
    """
    tracker = FlushTracker(100)
    tracker.on_prepared("x", 150)
    tracker.on_prepared("y", 200)  # prepared after x, still open
    tracker.on_prepare_resolved("x", commit_end_lsn=300)
    tracker.on_commit(300)
    tracker.on_durable(300)
    assert tracker.positions(decoder_idle=True).flush == 150  # not y's 200, inside x's span
    tracker.on_prepare_resolved("y")  # rolled back
    tracker.on_keepalive(400)
    assert tracker.positions(decoder_idle=True).flush == 400
    tracker.on_prepared("z", 450)  # x is forgotten once acknowledged past its end
    tracker.on_prepare_resolved("z", commit_end_lsn=500)
    tracker.on_commit(500)
    tracker.on_durable(500)
    assert tracker.positions(decoder_idle=True).flush == 500


_EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.integers(1, 20)),
        st.tuples(st.just("prepare"), st.integers(1, 20)),
        st.tuples(st.just("commit_prepared"), st.integers(0, 10)),
        st.tuples(st.just("rollback_prepared"), st.integers(0, 10)),
        st.tuples(st.just("durable"), st.integers(0, 10)),
        st.tuples(st.just("keepalive"), st.integers(0, 20)),
        st.tuples(st.just("poll"), st.booleans()),
    ),
    max_size=80,
)


@settings(max_examples=2000)
@given(_EVENTS)
def test_a_restart_from_the_flush_position_gets_every_prepare_it_needs(
    events: list[tuple[str, object]],
) -> None:
    """Model: one WAL of commits, PREPAREs and their resolutions, with increasing LSNs.

    At every poll the flush position is monotonic, passes no commit that is not durable,
    is at or before every open PREPARE, and is outside (PREPARE, COMMIT PREPARED end) of
    every prepared transaction committed since: a restart there would get the COMMIT
    PREPARED without its PREPARE.
    """
    tracker = FlushTracker(0)
    lsn = 0
    open_prepares: dict[str, int] = {}
    spans: list[tuple[int, int]] = []
    pending: list[int] = []
    durable = 0
    last_flush = 0
    for number, (kind, value) in enumerate(events):
        assert isinstance(value, int | bool)
        if kind in ("commit", "prepare"):
            lsn += int(value)
            if kind == "commit":
                tracker.on_commit(lsn)
                pending.append(lsn)
            else:
                open_prepares[f"g{number}"] = lsn
                tracker.on_prepared(f"g{number}", lsn)
        elif kind in ("commit_prepared", "rollback_prepared") and open_prepares:
            gid = sorted(open_prepares)[int(value) % len(open_prepares)]
            prepare_lsn = open_prepares.pop(gid)
            lsn += 5
            if kind == "commit_prepared":
                tracker.on_prepare_resolved(gid, commit_end_lsn=lsn)
                tracker.on_commit(lsn)
                pending.append(lsn)
                spans.append((prepare_lsn, lsn))
            else:
                tracker.on_prepare_resolved(gid)
        elif kind == "durable" and pending:
            upto = pending[min(int(value), len(pending) - 1)]
            tracker.on_durable(upto)
            durable = max(durable, upto)
            pending = [p for p in pending if p > durable]
        elif kind == "keepalive":
            lsn += int(value)
            tracker.on_keepalive(lsn)
        elif kind == "poll":
            flush = tracker.positions(decoder_idle=bool(value)).flush
            assert flush >= last_flush
            assert not pending or flush < pending[0]
            assert all(flush <= p for p in open_prepares.values())
            assert not any(p < flush < end for p, end in spans), (flush, spans)
            last_flush = flush


def test_changes_the_sink_holds_back_hold_flush_at_their_commit_lsn() -> None:
    """A held change's transaction is durable in the batch's accounting but not in Delta:
    the flush position stays at its commit LSN (the server then sends it again), and no
    keepalive walEnd moves past it."""
    tracker = FlushTracker(100)
    tracker.on_commit(200)
    tracker.on_commit(300)
    tracker.hold_for_sink(250)  # a change of the transaction ending at 300 is held
    tracker.on_durable(300)
    tracker.on_keepalive(500)
    assert tracker.positions(decoder_idle=True).flush == 250
    tracker.hold_for_sink(None)  # a later batch applied it
    assert tracker.positions(decoder_idle=True).flush == 500
