"""The one backoff rule of reconnects and object-store retries (``ReconnectSettings.delay``)."""

from __future__ import annotations

from capture import ReconnectSettings

BACKOFF = ReconnectSettings(initial_delay=1.0, max_delay=30.0, max_attempts=0)


def test_the_delay_doubles_from_the_initial_one_with_a_jitter_of_a_half_to_one() -> None:
    for attempt, full in ((1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0)):
        for _ in range(50):
            assert full / 2 <= BACKOFF.delay(attempt) <= full


def test_the_delay_stops_at_its_bound_however_many_attempts_failed() -> None:
    # Retries for ever (max_attempts 0) reach attempt numbers where 2.0 ** n overflows.
    for attempt in (6, 100, 1_025, 10**6):
        assert 15.0 <= BACKOFF.delay(attempt) <= 30.0
