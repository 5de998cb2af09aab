"""The lake's fixed names and the sink's vocabularies, defined once.

Every other sink module takes these from here. ``config`` imports nothing of the
project, so it repeats the literals its users see (defaults of ``metadata.*``,
``MESSAGES_TABLE``, ``source.on_missing_key``, ``spark.mode``, ``sink.column_names``);
``tests/unit/sink/test_constants.py`` pins them equal to these.
"""

from __future__ import annotations

from typing import Final, Literal

from decoder import RowOperation

#: Table (under the lake's root) that receives logical decoding messages.
MESSAGES_TABLE: Final = "_wal2delta_messages"
#: Table recording which tables' initial snapshots finished (snapshot markers).
SNAPSHOTS_TABLE: Final = "_wal2delta_snapshots"
#: Table recording which source attribute (``attnum``) each Delta column came from.
COLUMNS_TABLE: Final = "_wal2delta_columns"

#: Default names of the metadata columns the sink adds to every table.
LSN_COLUMN: Final = "_wal2delta_lsn"
COMMIT_TIME_COLUMN: Final = "_wal2delta_commit_ts"
DELETED_COLUMN: Final = "_wal2delta_deleted"
ORDINAL_COLUMN: Final = "_wal2delta_ordinal"
KEY_BUCKET_COLUMN: Final = "_wal2delta_key_bucket"
ROW_LSN_COLUMN: Final = "_wal2delta_row_lsn"
ROW_ORDINAL_COLUMN: Final = "_wal2delta_row_ordinal"

SparkMode = Literal["embedded", "connect", "classic"]
MissingKeyPolicy = Literal["error", "skip"]
ColumnNamePolicy = Literal["error", "map"]

__all__ = [
    "COLUMNS_TABLE",
    "COMMIT_TIME_COLUMN",
    "DELETED_COLUMN",
    "KEY_BUCKET_COLUMN",
    "LSN_COLUMN",
    "MESSAGES_TABLE",
    "ORDINAL_COLUMN",
    "ROW_LSN_COLUMN",
    "ROW_ORDINAL_COLUMN",
    "SNAPSHOTS_TABLE",
    "ColumnNamePolicy",
    "MissingKeyPolicy",
    "RowOperation",
    "SparkMode",
]
