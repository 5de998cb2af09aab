"""``config`` imports nothing of the project, so it repeats some of the sink's names and
vocabularies; these tests keep the two equal (``sink/constants.py`` is the definition).

The names of the metadata columns have one definition, in ``config/models.py``; the sink
gets them in its settings (``daemon.wiring.sink_settings``), so no pin is needed for them.
"""

from typing import get_args

import config
from config import models
from sink import constants


def test_messages_table_is_the_sinks() -> None:
    assert config.MESSAGES_TABLE == constants.MESSAGES_TABLE
    assert config.REJECTS_TABLE == constants.REJECTS_TABLE


def test_vocabularies_are_the_sinks() -> None:
    assert get_args(models.MissingKeyPolicy) == get_args(constants.MissingKeyPolicy)
    assert get_args(models.SparkMode) == get_args(constants.SparkMode)
    assert get_args(models.ColumnNamePolicy) == get_args(constants.ColumnNamePolicy)
    assert get_args(models.UnrepresentablePolicy) == get_args(constants.UnrepresentablePolicy)
    assert get_args(models.ColumnTypeOverride) == get_args(constants.ColumnTypeOverride)
    assert get_args(models.SnapshotWriter) == get_args(constants.BulkWriter)


def test_row_operation_is_the_decoders() -> None:
    from decoder import RowOperation

    assert constants.RowOperation is RowOperation
