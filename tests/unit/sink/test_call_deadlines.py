"""The watchdog of engine and store calls reports a call past its deadline, once, and
only such a call (``sink/engine/deadline.py``).

Calls here are real blocked threads; the deadlines are short, and nothing asserts how long
anything took: a report arrives or the test's own timeout fails it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pytest

from sink.engine.deadline import CallDeadlines, OverdueCall, engine_call, install_call_deadlines
from sink.engine.spark import engine_errors


@pytest.fixture
def overdue() -> queue.Queue[OverdueCall]:
    return queue.Queue()


@pytest.fixture
def deadlines(overdue: queue.Queue[OverdueCall]) -> Iterator[CallDeadlines]:
    watchdog = CallDeadlines(0.5, overdue.put)
    previous = install_call_deadlines(watchdog)
    yield watchdog
    install_call_deadlines(previous)
    watchdog.stop()


def _hang_in(
    action: str, release: threading.Event, wrap: str = "engine_errors"
) -> threading.Thread:
    def hang() -> None:
        with engine_errors(action) if wrap == "engine_errors" else engine_call(action):
            release.wait()

    thread = threading.Thread(target=hang, name=f"hung {action}", daemon=True)
    thread.start()
    return thread


@pytest.mark.timeout(30)
def test_a_call_past_its_deadline_is_reported_with_what_it_was_doing(
    deadlines: CallDeadlines, overdue: queue.Queue[OverdueCall]
) -> None:
    # Finished at once: never reported, so the first report is the hung call's.
    with engine_errors("reading the commit log"):
        pass
    release = threading.Event()
    thread = _hang_in("merging into public.orders", release)
    try:
        call = overdue.get(timeout=20)
    finally:
        release.set()
        thread.join(10)
    assert call.action == "merging into public.orders"
    assert call.thread == "hung merging into public.orders"
    assert call.timeout == 0.5
    assert call.elapsed >= 0.5
    assert call.describe().startswith(
        "an engine or store call did not return within its deadline of 0.5s while merging "
        "into public.orders"
    )
    assert overdue.empty(), "the finished call was never reported"
    assert deadlines.running == 0


@pytest.mark.timeout(30)
def test_a_delta_rs_call_has_the_same_deadline_and_each_overdue_call_is_reported_once(
    deadlines: CallDeadlines, overdue: queue.Queue[OverdueCall]
) -> None:
    release = threading.Event()
    threads = [
        _hang_in("compacting /lake/public/a", release, wrap="engine_call"),
        _hang_in("merging into public.b", release),
    ]
    try:
        reported = {overdue.get(timeout=20).action, overdue.get(timeout=20).action}
        assert deadlines.running == 0, "an overdue call is handed over once, then forgotten"
    finally:
        release.set()
        for thread in threads:
            thread.join(10)
    assert reported == {"compacting /lake/public/a", "merging into public.b"}
    assert overdue.empty()


def test_without_an_installed_watchdog_a_call_is_only_marked() -> None:
    assert install_call_deadlines(None) is None
    with engine_call("reading public.t"):
        pass


def test_a_deadline_must_be_positive(overdue: queue.Queue[OverdueCall]) -> None:
    with pytest.raises(ValueError, match="more than 0"):
        CallDeadlines(0, overdue.put)
