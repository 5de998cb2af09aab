"""Loading files, interpolating ``${VAR}`` and reporting every problem with its path."""

import pickle
from pathlib import Path

import pytest

from config import AppConfig, ConfigError, load_config, parse_config

MINIMAL = """\
source:
  dsn: "host=127.0.0.1 port=5432 dbname=app user=replicator"
  slot: wal2delta_app
  publication: wal2delta_app
  tables: [public.orders]
sink:
  path: ./lake
"""


def minimal() -> dict[str, dict[str, object]]:
    return {
        "source": {
            "dsn": "host=127.0.0.1 dbname=app user=replicator",
            "slot": "wal2delta_app",
            "publication": "wal2delta_app",
            "tables": ["public.orders"],
        },
        "sink": {"path": "./lake"},
    }


def errors_of(data: dict[str, dict[str, object]], **environ: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, environ=environ)
    return dict(info.value.errors)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_minimal_file_loads_with_documented_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL), environ={})
    assert isinstance(config, AppConfig)
    assert config.source.slot == "wal2delta_app"
    assert config.source.streaming == "auto"
    assert config.source.status_interval.total_seconds() == 10
    assert config.sink.batch.max_rows == 10_000
    assert config.spool.memory_limit == 8 * 1024**2
    assert config.metrics.port == 9187
    assert config.health.max_lag.total_seconds() == 300
    assert config.shutdown.grace_period.total_seconds() == 30


def test_missing_file_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.errors == [(str(path), "file not found")]
    assert info.value.source == str(path)


def test_directory_instead_of_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_non_utf8_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"source:\n  dsn: \xff\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


def test_bad_yaml_reports_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "source:\n  dsn: [unclosed\nsink:\n  path: x\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    [(where, message)] = info.value.errors
    assert where.startswith(f"{path}:3:")
    assert message.startswith("invalid YAML")


def test_duplicate_key_is_an_error_instead_of_last_one_wins(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "sink:\n  path: ./other\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    [(where, message)] = info.value.errors
    assert where == f"{path}:8:1"
    assert "duplicate key 'sink'" in message
    assert "first 'sink' on line 6" in message


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^\(top level\): the configuration is empty$"):
        load_config(write(tmp_path, "# nothing\n"))


def test_top_level_list_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="expected a mapping of sections"):
        load_config(write(tmp_path, "- source\n- sink\n"))


def test_missing_required_field_is_named() -> None:
    data = minimal()
    del data["source"]["slot"]
    assert errors_of(data) == {"source.slot": "required field is missing"}


def test_missing_section_is_named() -> None:
    data = minimal()
    del data["sink"]
    assert errors_of(data) == {"sink": "required field is missing"}


def test_wrong_type_is_named_with_pydantic_message() -> None:
    data = minimal()
    data["sink"]["batch"] = {"max_rows": "lots"}
    message = errors_of(data)["sink.batch.max_rows"]
    assert message.startswith("Input should be a valid integer")
    assert "'lots'" in message


def test_unknown_key_suggests_the_closest_field() -> None:
    data = minimal()
    data["sink"]["soft_delte"] = True
    assert errors_of(data) == {"sink.soft_delte": "unknown key; did you mean 'soft_delete'?"}


def test_unknown_key_without_close_match_lists_allowed_keys() -> None:
    data = minimal()
    data["metrics"] = {"bogus": 1}
    assert errors_of(data) == {"metrics.bogus": "unknown key (allowed: enabled, host, port)"}


def test_unknown_key_inside_a_table_entry_is_named_by_index() -> None:
    data = minimal()
    data["source"]["tables"] = ["public.a", {"name": "public.b", "colums": ["id"]}]
    assert errors_of(data) == {"source.tables.1.colums": "unknown key; did you mean 'columns'?"}


def test_unknown_top_level_section_is_named() -> None:
    data = minimal()
    data["sinks"] = {}
    assert errors_of(data) == {"sinks": "unknown key; did you mean 'sink'?"}


def test_bad_enum_value_lists_choices_and_the_value_given() -> None:
    data = minimal()
    data["source"]["streaming"] = "paralel"
    assert errors_of(data) == {
        "source.streaming": "Input should be 'auto', 'off', 'on' or 'parallel' (got 'paralel')"
    }


def test_bad_duration_is_named() -> None:
    data = minimal()
    data["source"]["status_interval"] = "10 sec"
    assert errors_of(data)["source.status_interval"].startswith("invalid duration '10 sec'")


def test_bad_size_is_named() -> None:
    data = minimal()
    data["spool"] = {"memory_limit": "64 megs"}
    assert errors_of(data)["spool.memory_limit"].startswith("invalid size '64 megs'")


def test_all_problems_are_reported_together_in_document_order() -> None:
    data = minimal()
    data["source"]["slot"] = "Bad-Slot"
    data["sink"]["batch"] = {"max_age": "soon"}
    data["metrics"] = {"port": 70000}
    data["logging"] = {"format": "xml"}
    with pytest.raises(ConfigError) as info:
        parse_config(data, environ={})
    assert [path for path, _ in info.value.errors] == [
        "source.slot",
        "sink.batch.max_age",
        "metrics.port",
        "logging.format",
    ]


def test_config_error_str_has_one_line_per_problem() -> None:
    error = ConfigError([("source.slot", "bad"), ("sink.path", "missing"), ("", "empty")])
    assert str(error).splitlines() == [
        "source.slot: bad",
        "sink.path: missing",
        "(top level): empty",
    ]


def test_config_error_is_a_value_error_and_survives_pickling() -> None:
    error = ConfigError([("source.slot", "bad")], source="/etc/wal2delta/config.yaml")
    clone = pickle.loads(pickle.dumps(error))
    assert isinstance(clone, ConfigError)
    assert isinstance(error, ValueError)
    assert clone.errors == error.errors
    assert clone.source == error.source
    assert str(clone) == str(error)


def test_config_error_from_a_file_carries_the_file_name(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL.replace("wal2delta_app\n  publication", "X\n  publication"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.source == str(path)
    assert [p for p, _ in info.value.errors] == ["source.slot"]


class TestInterpolation:
    def test_variable_is_replaced_in_any_string_value(self) -> None:
        data = minimal()
        data["source"]["dsn"] = "host=${PGHOST} dbname=app"
        data["sink"]["path"] = "${LAKE}/bronze"
        config = parse_config(data, environ={"PGHOST": "db.internal", "LAKE": "s3://bucket"})
        assert config.source.dsn == "host=db.internal dbname=app"
        assert config.sink.path == "s3://bucket/bronze"

    def test_default_is_used_when_variable_is_unset_or_empty(self) -> None:
        data = minimal()
        data["sink"]["path"] = "${LAKE:-./lake}"
        assert parse_config(data, environ={}).sink.path == "./lake"
        assert parse_config(data, environ={"LAKE": ""}).sink.path == "./lake"
        assert parse_config(data, environ={"LAKE": "/data"}).sink.path == "/data"

    def test_unset_variable_without_default_names_the_field_and_variable(self) -> None:
        data = minimal()
        data["source"]["password"] = "${PGPASSWORD}"
        assert errors_of(data) == {"source.password": "environment variable PGPASSWORD is not set"}

    def test_unset_variable_in_a_list_item_names_the_index(self) -> None:
        data = minimal()
        data["source"]["tables"] = ["public.a", "${SECOND_TABLE}"]
        assert errors_of(data) == {
            "source.tables.1": "environment variable SECOND_TABLE is not set"
        }

    def test_unset_variable_is_reported_once_not_also_as_a_type_error(self) -> None:
        data = minimal()
        data["metrics"] = {"port": "${METRICS_PORT}"}
        assert errors_of(data) == {"metrics.port": "environment variable METRICS_PORT is not set"}

    def test_interpolation_and_validation_problems_are_reported_together(self) -> None:
        data = minimal()
        data["source"]["password"] = "${PGPASSWORD}"
        data["sink"]["soft_delete"] = "perhaps"
        assert set(errors_of(data)) == {"source.password", "sink.soft_delete"}

    def test_double_dollar_is_a_literal_dollar(self) -> None:
        data = minimal()
        data["source"]["password"] = "pa$$word$${HOME}"
        config = parse_config(data, environ={"HOME": "/root"})
        assert config.source.password is not None
        assert config.source.password.get_secret_value() == "pa$word${HOME}"

    def test_lone_dollar_is_kept_as_written(self) -> None:
        data = minimal()
        data["source"]["password"] = "pa$word$"
        config = parse_config(data, environ={})
        assert config.source.password is not None
        assert config.source.password.get_secret_value() == "pa$word$"

    @pytest.mark.parametrize("reference", ["${1ABC}", "${UNCLOSED", "${}", "${A B}"])
    def test_malformed_reference_is_an_error(self, reference: str) -> None:
        data = minimal()
        data["sink"]["path"] = reference
        assert errors_of(data)["sink.path"].startswith("invalid variable reference")

    def test_replacement_is_not_interpolated_again(self) -> None:
        data = minimal()
        data["sink"]["path"] = "${LAKE}"
        assert parse_config(data, environ={"LAKE": "${OTHER}"}).sink.path == "${OTHER}"

    def test_keys_are_not_interpolated(self) -> None:
        data = minimal()
        data["sink"]["spark"] = {"conf": {"${KEY}": "x"}}
        config = parse_config(data, environ={"KEY": "spark.x"})
        assert config.sink.spark.conf == {"${KEY}": "x"}

    def test_strings_from_the_environment_become_numbers_booleans_and_versions(self) -> None:
        data = minimal()
        data["metrics"] = {"port": "${PORT}", "enabled": "${ENABLED}"}
        data["source"]["protocol_version"] = "${PROTO}"
        data["source"]["streaming"] = "${STREAMING}"
        config = parse_config(
            data,
            environ={"PORT": "9300", "ENABLED": "false", "PROTO": "4", "STREAMING": "parallel"},
        )
        assert config.metrics.port == 9300
        assert config.metrics.enabled is False
        assert config.source.protocol_version == 4
        assert config.source.streaming == "parallel"

    def test_process_environment_is_used_by_default(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("WAL2DELTA_TEST_LAKE", "/from/env")
        data = minimal()
        data["sink"]["path"] = "${WAL2DELTA_TEST_LAKE}"
        assert parse_config(data).sink.path == "/from/env"

    def test_input_document_is_not_modified(self) -> None:
        data = minimal()
        data["sink"]["path"] = "${LAKE}"
        parse_config(data, environ={"LAKE": "/x"})
        assert data["sink"]["path"] == "${LAKE}"


def test_yaml_unquoted_on_and_off_mean_streaming_modes(tmp_path: Path) -> None:
    """YAML 1.1 reads ``off`` as false; the streaming field takes it back as 'off'."""
    off = load_config(write(tmp_path, MINIMAL.replace("  tables", "  streaming: off\n  tables")))
    on = load_config(write(tmp_path, MINIMAL.replace("  tables", "  streaming: on\n  tables")))
    assert off.source.streaming == "off"
    assert on.source.streaming == "on"
