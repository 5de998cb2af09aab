"""FlushTracker and FeedbackPolicy: what may be acknowledged, and when."""

from __future__ import annotations

from hypothesis import given
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
