"""Lines that reach stderr past structlog leave the process as JSON events."""

from __future__ import annotations

import json

from daemon.logging import as_json_line


def test_engine_lines_keep_their_time_level_and_target() -> None:
    line = "[2026-11-23T21:30:41Z WARN sail_common::actor] aborting 10 task(s)\n"
    assert json.loads(as_json_line(line)) == {
        "event": "aborting 10 task(s)",
        "level": "warning",
        "logger": "sail_common::actor",
        "timestamp": "2026-11-23T21:30:41Z",
    }


def test_our_json_passes_unchanged_and_anything_else_is_wrapped() -> None:
    ours = '{"event": "batch applied", "level": "info"}'
    assert as_json_line(ours + "\n") == ours
    wrapped = json.loads(as_json_line("Traceback (most recent call last):\n"))
    assert (wrapped["event"], wrapped["logger"], wrapped["level"]) == (
        "Traceback (most recent call last):",
        "stderr",
        "warning",
    )
    assert json.loads(as_json_line("{not json"))["event"] == "{not json"
