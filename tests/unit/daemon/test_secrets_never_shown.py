"""The source password never shows: not in a settings ``repr``, a log line or a traceback.

A traceback is where a secret leaks unnoticed: every frame's locals (a connection string,
a settings object) are rendered by structlog's ``dict_tracebacks`` unless told otherwise.
These tests raise from a frame that holds the connection string, log the exception in
both formats and scan the whole output for the password.
"""

from __future__ import annotations

import json

import pytest
import structlog

from capture import CaptureSettings
from config import AppConfig, parse_config
from daemon.logging import configure_logging
from daemon.wiring import capture_settings

PASSWORD = "s3cr3t-Never-Shown-42"


def config_with_password() -> AppConfig:
    return parse_config(
        {
            "source": {
                "dsn": "host=127.0.0.1 port=1 dbname=app user=wal2delta",
                "password": PASSWORD,
                "slot": "wal2delta_app",
                "publication": "wal2delta_app",
                "create_publication": False,
            },
            "sink": {"path": "/tmp/unused-lake"},
        },
        environ={},
    )


def open_replication(settings: CaptureSettings) -> None:
    """A frame with the connection string in a local, failing as a connect would."""
    conninfo = settings.conninfo
    raise ConnectionError(f"could not connect to {conninfo.split()[0]}")


def log_a_failed_connect(settings: CaptureSettings) -> None:
    try:
        open_replication(settings)
    except ConnectionError:
        structlog.get_logger("wal2delta.test").exception("replication connection failed")


def test_the_settings_repr_holds_no_password_but_connections_get_it() -> None:
    settings = capture_settings(config_with_password())
    assert PASSWORD in settings.conninfo
    assert PASSWORD not in repr(settings)
    assert PASSWORD not in str(settings)
    assert "resolve_conninfo" not in repr(settings)
    assert "wal2delta_app" in repr(settings)  # the rest is still shown


def test_json_tracebacks_show_frames_but_no_locals(
    restored_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("json", "info")
    log_a_failed_connect(capture_settings(config_with_password()))
    output = capsys.readouterr()
    text = output.out + output.err
    [line] = [line for line in output.err.splitlines() if line.startswith("{")]
    event = json.loads(line)
    [exception] = event["exception"]
    functions = [frame["name"] for frame in exception["frames"]]
    assert functions == ["log_a_failed_connect", "open_replication"]
    assert exception["exc_type"] == "ConnectionError"
    assert all("locals" not in frame for frame in exception["frames"])
    assert PASSWORD not in text


def test_structlogs_default_dict_tracebacks_would_have_shown_the_password() -> None:
    """The control: the renderer replaced shows locals, so the scan above can fail."""
    settings = capture_settings(config_with_password())
    try:
        open_replication(settings)
    except ConnectionError as exc:
        rendered = structlog.processors.dict_tracebacks(None, "error", {"exc_info": exc})
    assert PASSWORD in json.dumps(rendered, default=str)


def test_console_tracebacks_show_no_locals(
    restored_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("console", "info")
    log_a_failed_connect(capture_settings(config_with_password()))
    output = capsys.readouterr()
    text = output.out + output.err
    assert "Traceback (most recent call last)" in text
    assert "open_replication" in text
    assert "ConnectionError" in text
    assert PASSWORD not in text
