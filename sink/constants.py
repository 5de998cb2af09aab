"""The lake's fixed names and the sink's vocabularies, defined once.

Every other sink module takes these from here. ``config`` imports nothing of the
project, so it repeats the literals its users see (``MESSAGES_TABLE``, ``REJECTS_TABLE``
and the vocabularies of ``source.on_missing_key``, ``spark.mode``, ``sink.column_names``,
...); ``tests/unit/sink/test_constants.py`` pins them equal to these. The names of the
metadata columns are settings, not fixed names: they are defined in ``config/models.py``
and reach the sink in ``SinkSettings.metadata``.
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
#: Table recording, after every batch, its source position and the Delta version of every
#: table it wrote (``commits.py``; ``wal2delta cut`` reads it).
COMMITS_TABLE: Final = "_wal2delta_commits"
#: Table recording the tables copied while streaming, requested, in progress or done, and
#: the position each copy met the stream at (``copies.py``).
COPIES_TABLE: Final = "_wal2delta_copies"
#: Where a table copied while streaming is written before it replaces the table in one
#: commit: ``<table>/wal2delta-copy-<consistent point>``, inside the table's directory so
#: the table can adopt the files (``adoption.py``).
STAGING_PREFIX: Final = "wal2delta-copy-"
#: Prefix of the logical decoding messages that ask the daemon for something (``wal2delta
#: resync`` writes ``wal2delta.resync``).
CONTROL_MESSAGE_PREFIX: Final = "wal2delta."
#: Suffix of a table's change history: ``<schema>/<table>__changes`` (``steps/step_history.py``).
HISTORY_SUFFIX: Final = "__changes"
#: Columns of a change history besides the table's own (``steps/step_history.py``).
HISTORY_OPERATION_COLUMN: Final = "_wal2delta_op"
HISTORY_OLD_KIND_COLUMN: Final = "_wal2delta_old_kind"
HISTORY_UNCHANGED_COLUMN: Final = "_wal2delta_unchanged_toast"
HISTORY_OLD_PREFIX: Final = "_wal2delta_old_"
#: Prefix of a new value whose column's own name lies in the history's names
#: (``steps/step_history.py``).
HISTORY_NEW_PREFIX: Final = "_wal2delta_new_"
HISTORY_XID_COLUMN: Final = "_wal2delta_xid"

SparkMode = Literal["embedded", "connect", "classic"]
MissingKeyPolicy = Literal["error", "skip"]
ColumnNamePolicy = Literal["error", "map"]
BulkWriter = Literal["auto", "spark", "delta-rs"]
#: ``sink.column_types``: store a column as PostgreSQL's text form, or a numeric as DOUBLE.
ColumnTypeOverride = Literal["string", "double"]
#: ``sink.on_unrepresentable``: store a legal value its Delta type cannot hold under its
#: documented convention (``unrepresentable.py``), or stop the daemon.
UnrepresentablePolicy = Literal["keep", "stop"]
#: Table (under the lake's root) keeping the exact text of every value stored under a
#: convention (``rejects.py``).
REJECTS_TABLE: Final = "_wal2delta_rejects"

__all__ = [
    "COLUMNS_TABLE",
    "COMMITS_TABLE",
    "CONTROL_MESSAGE_PREFIX",
    "COPIES_TABLE",
    "HISTORY_NEW_PREFIX",
    "HISTORY_OLD_KIND_COLUMN",
    "HISTORY_OLD_PREFIX",
    "HISTORY_OPERATION_COLUMN",
    "HISTORY_SUFFIX",
    "HISTORY_UNCHANGED_COLUMN",
    "HISTORY_XID_COLUMN",
    "MESSAGES_TABLE",
    "REJECTS_TABLE",
    "SNAPSHOTS_TABLE",
    "STAGING_PREFIX",
    "BulkWriter",
    "ColumnNamePolicy",
    "ColumnTypeOverride",
    "MissingKeyPolicy",
    "RowOperation",
    "SparkMode",
    "UnrepresentablePolicy",
]
