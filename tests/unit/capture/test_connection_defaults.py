"""The libpq defaults of every connection to the source (``with_connection_defaults``):
TCP keepalives, ``tcp_user_timeout`` and ``connect_timeout`` added, a DSN's own values kept,
for key/value strings and URIs alike; ``daemon.wiring.source_conninfo`` applies them."""

from __future__ import annotations

from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from capture import CONNECTION_DEFAULTS, with_connection_defaults
from daemon.wiring import capture_settings, source_conninfo
from tests.support.configs import make_config


def test_the_defaults_are_added_to_a_dsn_that_names_none_of_them() -> None:
    params = conninfo_to_dict(
        with_connection_defaults("host=db dbname=app user=me", connect_timeout=7.4)
    )
    assert params == {
        "host": "db",
        "dbname": "app",
        "user": "me",
        "keepalives": "1",
        "keepalives_idle": "20",
        "keepalives_interval": "10",
        "keepalives_count": "3",
        "tcp_user_timeout": "60000",
        "connect_timeout": "7",
    }


def test_values_the_dsn_names_win() -> None:
    dsn = "host=db keepalives_idle=5 tcp_user_timeout=0 connect_timeout=30 keepalives=0"
    params = conninfo_to_dict(with_connection_defaults(dsn, connect_timeout=10))
    assert params["keepalives"] == "0"
    assert params["keepalives_idle"] == "5"
    assert params["tcp_user_timeout"] == "0"
    assert params["connect_timeout"] == "30"
    assert params["keepalives_interval"] == CONNECTION_DEFAULTS["keepalives_interval"]
    assert params["keepalives_count"] == CONNECTION_DEFAULTS["keepalives_count"]


def test_a_uri_dsn_keeps_its_parts_and_its_query_values() -> None:
    uri = "postgresql://me:s3cret@db.example:6432/app?sslmode=require&keepalives_count=6"
    params = conninfo_to_dict(with_connection_defaults(uri, connect_timeout=0.2))
    assert params["host"] == "db.example"
    assert params["port"] == "6432"
    assert params["dbname"] == "app"
    assert params["user"] == "me"
    assert params["password"] == "s3cret"
    assert params["sslmode"] == "require"
    assert params["keepalives_count"] == "6"
    assert params["keepalives_idle"] == "20"
    assert params["connect_timeout"] == "1"  # libpq's smallest useful value


def test_the_daemon_connects_with_the_defaults_and_the_password_merged_in(
    tmp_path: Path,
) -> None:
    config = make_config(
        "host=db dbname=app user=me keepalives_idle=15",
        tmp_path / "lake",
        ["public.items"],
        source={"password": "pw", "connect_timeout": "4s", "receive_timeout": "9s"},
    )
    for conninfo in (source_conninfo(config), capture_settings(config).conninfo):
        params = conninfo_to_dict(conninfo)
        assert params["password"] == "pw"
        assert params["keepalives"] == "1"
        assert params["keepalives_idle"] == "15"
        assert params["tcp_user_timeout"] == "60000"
        assert params["connect_timeout"] == "4"
    assert capture_settings(config).receive_timeout == 9.0
