"""``config`` imports nothing of the project, so it repeats some of the sink's names and
vocabularies; these tests keep the two equal (``sink/constants.py`` is the definition)."""

from typing import get_args

import config
from config import models
from sink import SinkSettings, constants


def test_messages_table_is_the_sinks() -> None:
    assert config.MESSAGES_TABLE == constants.MESSAGES_TABLE
    assert config.REJECTS_TABLE == constants.REJECTS_TABLE


def test_metadata_column_defaults_are_the_sinks() -> None:
    metadata = models.MetadataConfig()
    settings = SinkSettings(path="/lake")
    assert metadata.lsn_column == settings.lsn_column == constants.LSN_COLUMN
    assert metadata.commit_time_column == settings.commit_time_column
    assert settings.commit_time_column == constants.COMMIT_TIME_COLUMN
    assert metadata.deleted_column == settings.deleted_column == constants.DELETED_COLUMN
    assert metadata.key_bucket_column == settings.key_bucket_column
    assert settings.key_bucket_column == constants.KEY_BUCKET_COLUMN


def test_vocabularies_are_the_sinks() -> None:
    assert get_args(models.MissingKeyPolicy) == get_args(constants.MissingKeyPolicy)
    assert get_args(models.SparkMode) == get_args(constants.SparkMode)
    assert get_args(models.ColumnNamePolicy) == get_args(constants.ColumnNamePolicy)
    assert get_args(models.UnrepresentablePolicy) == get_args(constants.UnrepresentablePolicy)
    assert get_args(models.ColumnTypeOverride) == get_args(constants.ColumnTypeOverride)


def test_row_operation_is_the_decoders() -> None:
    from decoder import RowOperation

    assert constants.RowOperation is RowOperation
