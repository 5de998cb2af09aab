"""Model rules: secrets, tables, cross-field checks, immutability.

``config/models.py`` declares each setting once, as a pydantic ``Field`` with its default
and description (the one home of both); ``duplicates`` reports these blocks as pairs by
shape, and they stay.
"""

from datetime import timedelta
from pathlib import Path

import pydantic
import pytest

from config import (
    ORDINAL_COLUMN,
    ROW_LSN_COLUMN,
    ROW_ORDINAL_COLUMN,
    AppConfig,
    ConfigError,
    MetadataConfig,
    SourceConfig,
    parse_config,
    redact_spark_url,
)
from daemon.wiring import sink_settings, spark_settings
from decoder import (
    ColumnKind,
    ColumnValue,
    Lsn,
    Oid,
    PgTimestamp,
    Relation,
    RelationColumn,
    RowChange,
    TupleData,
)
from sink import Batch, KeyBuckets
from sink.planning.fold import plan_batch
from sink.planning.plan import MergeStep

SECRET = "hunter2-very-secret"


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


def parse(data: dict[str, dict[str, object]]) -> AppConfig:
    return parse_config(data, environ={})


def errors_of(data: dict[str, dict[str, object]]) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        parse_config(data, environ={})
    return dict(info.value.errors)


def every_rendering(config: AppConfig) -> list[str]:
    return [
        repr(config),
        str(config),
        repr(config.source),
        str(config.source),
        str(config.model_dump()),
        config.model_dump_json(),
        str(config.source.model_dump()),
        config.describe(),
    ]


class TestSecrets:
    def test_password_never_appears_in_repr_str_or_dumps(self) -> None:
        data = minimal()
        data["source"]["password"] = "${PGPASSWORD}"
        config = parse_config(data, environ={"PGPASSWORD": SECRET})
        for text in every_rendering(config):
            assert SECRET not in text

    def test_password_inside_the_dsn_is_redacted_in_repr_and_dumps(self) -> None:
        data = minimal()
        data["source"]["dsn"] = f"host=db user=app password={SECRET}"
        config = parse(data)
        for text in every_rendering(config):
            assert SECRET not in text
        assert "password=****" in repr(config)
        assert config.source.dsn.endswith(SECRET), "the attribute keeps the real DSN"

    def test_password_inside_a_uri_is_redacted(self) -> None:
        data = minimal()
        data["source"]["dsn"] = f"postgresql://app:{SECRET}@db/app"
        config = parse(data)
        for text in every_rendering(config):
            assert SECRET not in text

    def test_password_file_content_never_appears(self, tmp_path: Path) -> None:
        secret_file = tmp_path / "pg"
        secret_file.write_text(SECRET + "\n")
        data = minimal()
        data["source"]["password_file"] = str(secret_file)
        config = parse(data)
        for text in every_rendering(config):
            assert SECRET not in text

    def test_credential_like_spark_settings_are_masked(self) -> None:
        data = minimal()
        data["sink"]["spark"] = {
            "conf": {
                "spark.hadoop.fs.s3a.secret.key": SECRET,
                "spark.hadoop.fs.azure.account.key": SECRET,
                "spark.sql.shuffle.partitions": 4,
            }
        }
        config = parse(data)
        for text in every_rendering(config):
            assert SECRET not in text
        assert config.sink.spark.conf["spark.hadoop.fs.s3a.secret.key"] == SECRET
        assert config.sink.spark.conf["spark.sql.shuffle.partitions"] == "4"

    def test_a_spark_connect_token_is_masked_in_every_rendering(self) -> None:
        data = minimal()
        data["sink"]["spark"] = {
            "mode": "connect",
            "url": f"sc://spark.example:15002/;token={SECRET};user_id=etl",
        }
        config = parse(data)
        for text in every_rendering(config):
            assert SECRET not in text
        assert "user_id=etl" in config.model_dump_json()
        assert config.sink.spark.url is not None
        assert config.sink.spark.url.endswith(f";token={SECRET};user_id=etl")
        assert redact_spark_url("sc://h:1/;Token=x;PASSWORD=y;n=z") == (
            "sc://h:1/;Token=****;PASSWORD=****;n=z"
        )

    def test_unparseable_dsn_with_a_password_is_reported_without_echoing_it(self) -> None:
        data = minimal()
        data["source"]["dsn"] = f"host=db password={SECRET} broken"
        with pytest.raises(ConfigError) as info:
            parse(data)
        assert "source.dsn" in dict(info.value.errors)
        assert SECRET not in str(info.value)
        assert SECRET not in repr(info.value)

    def test_unparseable_dsn_without_a_password_says_why(self) -> None:
        data = minimal()
        data["source"]["dsn"] = "host=db broken"
        message = errors_of(data)["source.dsn"]
        assert "broken" in message

    def test_wrong_type_for_password_does_not_echo_the_value(self) -> None:
        data = minimal()
        data["source"]["password"] = [SECRET]
        with pytest.raises(ConfigError) as info:
            parse(data)
        assert "source.password" in dict(info.value.errors)
        assert SECRET not in str(info.value)


class TestConninfo:
    def test_password_is_merged_into_a_key_value_dsn(self) -> None:
        data = minimal()
        data["source"]["password"] = "p w'd"
        conninfo = parse(data).source.conninfo()
        from psycopg.conninfo import conninfo_to_dict

        assert conninfo_to_dict(conninfo) == {
            "host": "127.0.0.1",
            "dbname": "app",
            "user": "replicator",
            "password": "p w'd",
        }

    def test_password_is_merged_into_a_uri_dsn(self) -> None:
        from psycopg.conninfo import conninfo_to_dict

        data = minimal()
        data["source"]["dsn"] = "postgresql://replicator@db:5433/app?sslmode=require"
        data["source"]["password"] = "secret"
        params = conninfo_to_dict(parse(data).source.conninfo())
        assert params["password"] == "secret"
        assert params["host"] == "db"
        assert params["port"] == "5433"
        assert params["sslmode"] == "require"

    def test_without_password_the_dsn_is_returned_as_written(self) -> None:
        config = parse(minimal())
        assert config.source.conninfo() == config.source.dsn

    def test_password_file_is_stripped_and_reread_on_each_call(self, tmp_path: Path) -> None:
        from psycopg.conninfo import conninfo_to_dict

        secret_file = tmp_path / "pg"
        secret_file.write_text("  first\n")
        data = minimal()
        data["source"]["password_file"] = str(secret_file)
        source = parse(data).source
        assert conninfo_to_dict(source.conninfo())["password"] == "first"
        secret_file.write_text("rotated\n")
        assert conninfo_to_dict(source.conninfo())["password"] == "rotated"

    def test_password_file_that_disappears_later_raises_config_error(self, tmp_path: Path) -> None:
        secret_file = tmp_path / "pg"
        secret_file.write_text("first")
        data = minimal()
        data["source"]["password_file"] = str(secret_file)
        source = parse(data).source
        secret_file.unlink()
        with pytest.raises(ConfigError, match=r"^source\.password_file: file .* does not exist$"):
            source.conninfo()


class TestPasswordRules:
    def test_missing_password_file_is_a_config_error(self, tmp_path: Path) -> None:
        data = minimal()
        data["source"]["password_file"] = str(tmp_path / "absent")
        assert errors_of(data)["source.password_file"].endswith("does not exist")

    def test_empty_password_file_is_a_config_error(self, tmp_path: Path) -> None:
        (tmp_path / "pg").write_text("\n")
        data = minimal()
        data["source"]["password_file"] = str(tmp_path / "pg")
        assert errors_of(data)["source.password_file"].endswith("is empty")

    def test_password_and_password_file_together_are_rejected(self, tmp_path: Path) -> None:
        (tmp_path / "pg").write_text("x")
        data = minimal()
        data["source"]["password"] = "y"
        data["source"]["password_file"] = str(tmp_path / "pg")
        assert errors_of(data) == {
            "source.password_file": "set either password or password_file, not both"
        }

    def test_password_in_dsn_and_password_field_together_are_rejected(self) -> None:
        data = minimal()
        data["source"]["dsn"] = "host=db password=a"
        data["source"]["password"] = "b"
        assert "source.dsn" in errors_of(data)


class TestTables:
    def test_strings_and_objects_are_both_accepted_and_normalised(self) -> None:
        data = minimal()
        data["source"]["tables"] = [
            "orders",
            {
                "name": "sales.customers",
                "where": "region = 'eu'",
                "columns": ["id", "name"],
                "key": ["id"],
            },
            '"odd.schema".Items',
        ]
        tables = parse(data).source.tables
        assert [t.name for t in tables] == [
            "public.orders",
            "sales.customers",
            '"odd.schema".Items',
        ]
        assert (tables[1].schema_name, tables[1].table_name) == ("sales", "customers")
        assert tables[1].where == "region = 'eu'"
        assert tables[1].columns == ("id", "name")
        assert tables[1].key == ("id",)
        assert (tables[2].schema_name, tables[2].table_name) == ("odd.schema", "Items")

    def test_duplicate_tables_are_rejected_even_when_spelt_differently(self) -> None:
        data = minimal()
        data["source"]["tables"] = ["public.orders", "orders"]
        assert errors_of(data) == {
            "source.tables.1.name": "public.orders is already listed as tables.0"
        }

    def test_at_least_one_table_when_creating_the_publication(self) -> None:
        data = minimal()
        data["source"]["tables"] = []
        assert "source.tables" in errors_of(data)

    def test_no_tables_needed_when_the_publication_exists(self) -> None:
        data = minimal()
        data["source"]["tables"] = []
        data["source"]["create_publication"] = False
        assert parse(data).source.tables == ()

    def test_key_must_be_among_published_columns(self) -> None:
        data = minimal()
        data["source"]["tables"] = [{"name": "t", "columns": ["name"], "key": ["id"]}]
        assert errors_of(data) == {
            "source.tables.0.key": "key columns ['id'] are not in columns; publish them too"
        }

    def test_empty_and_repeated_column_lists_are_rejected(self) -> None:
        data = minimal()
        data["source"]["tables"] = [
            {"name": "a", "columns": []},
            {"name": "b", "key": ["id", "id"]},
        ]
        errors = errors_of(data)
        assert errors["source.tables.0.columns"] == "must list at least one column"
        assert errors["source.tables.1.key"] == "column 'id' is listed twice"

    def test_key_for_merges_table_keys_and_sink_keys(self) -> None:
        data = minimal()
        data["source"]["tables"] = [{"name": "a", "key": ["id"]}, "b", "c"]
        data["sink"]["keys"] = {"b": ["code", "region"]}
        config = parse(data)
        assert config.key_for("public", "a") == ("id",)
        assert config.key_for("public", "b") == ("code", "region")
        assert config.key_for("public", "c") is None

    def test_sink_keys_must_name_a_listed_table(self) -> None:
        data = minimal()
        data["sink"]["keys"] = {"public.ordrs": ["id"]}
        assert errors_of(data) == {
            "sink.keys.public.ordrs": "public.ordrs is not one of source.tables"
        }

    def test_stall_timeout_must_be_above_the_call_deadline(self) -> None:
        data = minimal()
        data["sink"]["spark"] = {"call_timeout": "10m"}
        data["health"] = {"stall_timeout": "5m"}
        message = errors_of(data)["health.stall_timeout"]
        assert message.startswith("must be above sink.spark.call_timeout (10m)")
        data["health"] = {"stall_timeout": "0s"}  # disabled: no rule between them
        assert parse(data).health.stall_timeout == timedelta(0)
        data["health"] = {"stall_timeout": "11m"}
        assert parse(data).health.stall_timeout == timedelta(minutes=11)

    def test_sink_keys_may_name_any_table_when_tables_are_not_listed(self) -> None:
        data = minimal()
        data["source"]["tables"] = []
        data["source"]["create_publication"] = False
        data["sink"]["keys"] = {"public.t": ["id"]}
        assert parse(data).key_for("public", "t") == ("id",)

    def test_partition_by_key_names_a_listed_table_and_a_positive_width(self) -> None:
        data = minimal()
        data["source"]["tables"] = ["orders"]
        data["sink"]["partition_by_key"] = {"orders": {"width": 1000}, "public.ordrs": {"width": 1}}
        assert errors_of(data) == {
            "sink.partition_by_key.public.ordrs": "public.ordrs is not one of source.tables"
        }
        data["sink"]["partition_by_key"] = {"orders": {"width": 0}}
        assert errors_of(data) == {
            "sink.partition_by_key.orders.width": "Input should be greater than or equal to 1"
        }

    def test_partition_by_key_reaches_the_sink_settings(self) -> None:
        data = minimal()
        data["source"]["tables"] = ["orders"]
        data["sink"]["partition_by_key"] = {"orders": {"width": 500, "column": "id"}}
        data["sink"]["metadata"] = {"key_bucket_column": "bucket"}
        settings = sink_settings(parse(data))
        assert settings.key_buckets == {"public.orders": KeyBuckets(width=500, column="id")}
        assert settings.metadata.key_bucket == "bucket"

    def test_metadata_names_and_soft_delete_reach_the_sink_settings(self) -> None:
        defaults = MetadataConfig()
        meta = sink_settings(parse(minimal())).metadata
        assert (meta.lsn, meta.commit_time, meta.deleted, meta.key_bucket) == (
            defaults.lsn_column,
            defaults.commit_time_column,
            defaults.deleted_column,
            defaults.key_bucket_column,
        )
        assert (meta.ordinal, meta.row_lsn, meta.row_ordinal, meta.soft_delete) == (
            ORDINAL_COLUMN,
            ROW_LSN_COLUMN,
            ROW_ORDINAL_COLUMN,
            False,
        )
        data = minimal()
        data["sink"]["metadata"] = {"lsn_column": "l", "commit_time_column": "t"}
        data["sink"]["soft_delete"] = True
        meta = sink_settings(parse(data)).metadata
        assert (meta.lsn, meta.commit_time, meta.soft_delete) == ("l", "t", True)
        assert {"l", "t", defaults.deleted_column, ORDINAL_COLUMN} <= set(meta.reserved)

    def test_column_names_is_error_or_map_and_reaches_the_sink_settings(self) -> None:
        data = minimal()
        assert sink_settings(parse(data)).column_names == "error"
        data["sink"]["column_names"] = "map"
        assert sink_settings(parse(data)).column_names == "map"
        data["sink"]["column_names"] = "rename"
        assert set(errors_of(data)) == {"sink.column_names"}

    def test_snapshot_writer_is_auto_spark_or_delta_rs_and_reaches_the_sink_settings(
        self,
    ) -> None:
        data = minimal()
        assert sink_settings(parse(data)).bulk_writer == "auto"
        data["snapshot"] = {"writer": "spark"}
        assert sink_settings(parse(data)).bulk_writer == "spark"
        data["snapshot"] = {"writer": "delta-rs"}
        assert sink_settings(parse(data)).bulk_writer == "delta-rs"
        data["snapshot"] = {"writer": "polars"}
        assert set(errors_of(data)) == {"snapshot.writer"}

    def test_compact_after_writes_defaults_to_20_and_zero_turns_it_off(self) -> None:
        data = minimal()
        assert sink_settings(parse(data)).compact_after_writes == 20
        data["sink"]["compact_after_writes"] = 0
        assert sink_settings(parse(data)).compact_after_writes == 0
        data["sink"]["compact_after_writes"] = -1
        assert set(errors_of(data)) == {"sink.compact_after_writes"}

    def test_keys_of_tables_with_dots_in_their_names_reach_the_sink_by_relation_name(
        self,
    ) -> None:
        data = minimal()
        data["source"]["tables"] = [{"name": 'public."a.b"', "key": ["id"]}, '"s.x".t']
        data["sink"]["keys"] = {'"s.x".t': ["code"]}
        data["sink"]["partition_by_key"] = {'public."a.b"': {"width": 10}}
        settings = sink_settings(parse(data))
        assert settings.keys == {"public.a.b": ("id",), "s.x.t": ("code",)}
        assert set(settings.key_buckets) == {"public.a.b"}
        full = Relation(
            xid=None,
            relation_id=Oid(1),
            namespace="public",
            relation_name="a.b",
            replica_identity="f",
            columns=(RelationColumn(1, "id", Oid(23), -1), RelationColumn(1, "v", Oid(25), -1)),
        )
        change = RowChange(
            op="insert",
            relation=full,
            new=TupleData((ColumnValue(ColumnKind.TEXT, b"1"), ColumnValue(ColumnKind.TEXT, b"x"))),
            old=None,
            old_kind=None,
            commit_lsn=Lsn(1),
            commit_time=PgTimestamp(0),
            ordinal=0,
        )
        batch = Batch(
            changes=(change,), durable_lsn=Lsn(1), transaction_count=1, last_commit_time=None
        )
        (step,) = plan_batch(batch, keys=settings.keys).tables[0].steps
        assert isinstance(step, MergeStep)
        assert [c.name for c in step.match_columns] == ["id"]

    def test_the_key_bucket_column_differs_from_the_other_metadata_columns(self) -> None:
        data = minimal()
        data["sink"]["metadata"] = {"key_bucket_column": "_wal2delta_lsn"}
        assert "sink.metadata.key_bucket_column" in errors_of(data)

    def test_conflicting_keys_in_tables_and_sink_keys_are_rejected(self) -> None:
        data = minimal()
        data["source"]["tables"] = [{"name": "t", "key": ["id"]}]
        data["sink"]["keys"] = {"t": ["other"]}
        assert "sink.keys.public.t" in errors_of(data)


class TestSourceRules:
    @pytest.mark.parametrize("slot", ["Upper", "with-dash", "", "x" * 64, "space here"])
    def test_slot_names_follow_postgresql_rules(self, slot: str) -> None:
        data = minimal()
        data["source"]["slot"] = slot
        assert "source.slot" in errors_of(data)

    def test_numeric_looking_names_need_no_quotes(self) -> None:
        data = minimal()
        data["source"]["slot"] = 2024
        assert parse(data).source.slot == "2024"

    def test_publication_longer_than_63_bytes_is_rejected(self) -> None:
        data = minimal()
        data["source"]["publication"] = "é" * 32
        assert "64 bytes" in errors_of(data)["source.publication"]

    def test_one_publication_name_is_a_list_of_one(self) -> None:
        assert parse(minimal()).source.publication == ("wal2delta_app",)

    def test_several_publications_are_kept_in_order(self) -> None:
        data = minimal()
        data["source"]["publication"] = ["orders_eu", "Orders US"]
        data["source"]["create_publication"] = False
        config = parse(data)
        assert config.source.publication == ("orders_eu", "Orders US")
        assert "publication=orders_eu,Orders US " in config.describe()

    @pytest.mark.parametrize(
        ("publications", "message"),
        [
            ([], "name at least one publication"),
            (["a", "b", "a"], "publication 'a' is listed twice"),
            (["a", ""], "publication name must not be empty"),
        ],
    )
    def test_publication_lists_are_checked(self, publications: list[str], message: str) -> None:
        data = minimal()
        data["source"]["publication"] = publications
        data["source"]["create_publication"] = False
        assert message in errors_of(data)["source.publication"]

    def test_create_publication_creates_one_publication_only(self) -> None:
        data = minimal()
        data["source"]["publication"] = ["a", "b"]
        message = errors_of(data)["source.publication"]
        assert "create_publication is true but several publications are named" in message

    @pytest.mark.parametrize(
        ("settings", "field"),
        [
            ({"protocol_version": 1, "streaming": "on"}, "source.streaming"),
            ({"protocol_version": 3, "streaming": "parallel"}, "source.streaming"),
            ({"protocol_version": 2, "two_phase": True}, "source.two_phase"),
        ],
    )
    def test_features_need_their_protocol_version_when_it_is_explicit(
        self, settings: dict[str, object], field: str
    ) -> None:
        data = minimal()
        data["source"].update(settings)
        assert field in errors_of(data)

    def test_auto_protocol_leaves_feature_checks_to_the_server(self) -> None:
        data = minimal()
        data["source"].update({"streaming": "parallel", "two_phase": True})
        source = parse(data).source
        assert source.protocol_version == "auto"
        assert source.streaming == "parallel"

    @pytest.mark.parametrize("version", [0, 5, "latest"])
    def test_protocol_version_is_auto_or_one_to_four(self, version: object) -> None:
        data = minimal()
        data["source"]["protocol_version"] = version
        assert "source.protocol_version" in errors_of(data)

    def test_reconnect_max_delay_must_not_be_below_initial_delay(self) -> None:
        data = minimal()
        data["source"]["reconnect"] = {"initial_delay": "10s", "max_delay": "5s"}
        assert errors_of(data) == {"source.reconnect.max_delay": "must be at least initial_delay"}

    def test_heartbeat_needs_both_interval_and_statement(self) -> None:
        data = minimal()
        data["source"]["heartbeat"] = {"statement": "SELECT 1"}
        assert errors_of(data) == {"source.heartbeat.interval": "required when statement is set"}

    @pytest.mark.parametrize("value", [0, "0s", "-1s"])
    def test_zero_or_negative_intervals_are_rejected(self, value: object) -> None:
        data = minimal()
        data["source"]["status_interval"] = value
        assert "source.status_interval" in errors_of(data)

    def test_zero_grace_period_is_allowed(self) -> None:
        data = minimal()
        data["shutdown"] = {"grace_period": 0}
        assert parse(data).shutdown.grace_period == timedelta(0)


class TestSinkRules:
    def test_connect_mode_needs_a_spark_connect_url(self) -> None:
        data = minimal()
        data["sink"]["spark"] = {"mode": "connect"}
        assert errors_of(data) == {"sink.spark.url": "required when mode is 'connect'"}
        data["sink"]["spark"] = {"mode": "connect", "url": "http://spark:15002"}
        assert "sc://" in errors_of(data)["sink.spark.url"]
        data["sink"]["spark"] = {"mode": "connect", "url": "sc://spark:15002"}
        assert parse(data).sink.spark.url == "sc://spark:15002"

    def test_engine_parallelism_is_auto_or_a_positive_count_for_the_embedded_engine(
        self,
    ) -> None:
        data = minimal()
        assert parse(data).sink.spark.parallelism == "auto"
        assert spark_settings(parse(data)).parallelism is None
        data["sink"]["spark"] = {"parallelism": 3}
        assert spark_settings(parse(data)).parallelism == 3
        for wrong in (0, -2, "many", True, 1.5):
            data["sink"]["spark"] = {"parallelism": wrong}
            assert errors_of(data) == {
                "sink.spark.parallelism": "must be 'auto' or a whole number of at least 1"
            }
        data["sink"]["spark"] = {"mode": "connect", "url": "sc://spark:15002", "parallelism": 2}
        assert errors_of(data) == {
            "sink.spark.parallelism": "only used when mode is 'embedded', not 'connect'"
        }

    def test_url_without_connect_mode_is_rejected(self) -> None:
        data = minimal()
        data["sink"]["spark"] = {"url": "sc://spark:15002"}
        assert "sink.spark.url" in errors_of(data)

    def test_batch_ceiling_must_not_be_below_max_rows(self) -> None:
        data = minimal()
        data["sink"]["batch"] = {"max_rows": 1000, "max_rows_ceiling": 10}
        assert errors_of(data) == {"sink.batch.max_rows_ceiling": "must be at least max_rows"}

    def test_metadata_column_names_must_be_distinct(self) -> None:
        data = minimal()
        data["sink"]["metadata"] = {"lsn_column": "x", "deleted_column": "x"}
        assert errors_of(data) == {
            "sink.metadata.deleted_column": "must differ from lsn_column ('x')"
        }

    def test_messages_table_needs_source_messages(self) -> None:
        data = minimal()
        data["sink"]["messages"] = "table"
        assert "sink.messages" in errors_of(data)
        data["source"]["messages"] = True
        assert parse(data).sink.messages == "table"

    def test_spark_conf_booleans_become_spark_strings(self) -> None:
        data = minimal()
        data["sink"]["spark"] = {"conf": {"spark.sql.ansi.enabled": True}}
        assert parse(data).sink.spark.conf == {"spark.sql.ansi.enabled": "true"}


def test_models_are_frozen() -> None:
    config = parse(minimal())
    with pytest.raises(pydantic.ValidationError):
        config.source.slot = "other"


def test_models_validate_directly_with_the_same_rules() -> None:
    """Models built in code (tests, the daemon) obey the same rules as files."""
    with pytest.raises(pydantic.ValidationError):
        SourceConfig(dsn="host=x", slot="Bad", publication="p", tables=())


def test_log_level_is_case_insensitive() -> None:
    data = minimal()
    data["logging"] = {"level": "DEBUG", "format": "json"}
    assert parse(data).logging.level == "debug"
