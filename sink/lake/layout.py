"""How each Delta table is laid out when the sink creates it: its table properties.

``table_properties`` is the one place that decides them from the settings; ``DeltaSink``
passes its answer to ``LakeTables.load`` for every table it creates.

A table listed in ``sink.deletion_vectors`` (or every table, with ``true``) is created
with ``delta.enableDeletionVectors``: the engine's MERGE then marks the rows it replaces
or deletes in deletion vectors instead of rewriting the files holding them (Sail 0.7.2
does so; measured in ``python -m bench sink``, docs/performance.md), so a MERGE of a
batch of random keys writes the batch, not every file it touches. The property also adds
the ``deletionVectors`` reader and writer features to the table's protocol, which every
reader must then support (docs/operations.md, "Large tables updated at random keys").
Other tables get no property and stay readable by every Delta reader. The layout is
fixed when the table is created: the setting does not change a table that exists.
``compaction.py`` purges the vectors before reads slow down.
"""

from __future__ import annotations

from typing import Final

import structlog

from sink.lake.deltars import table_configuration
from sink.settings import SinkSettings
from sink.values.naming import table_of_path

log = structlog.get_logger("wal2delta.sink")

DELETION_VECTORS_PROPERTY: Final = "delta.enableDeletionVectors"


def uses_deletion_vectors(settings: SinkSettings, table: str) -> bool:
    """Whether the table ``table`` (``schema.table``) is created with deletion vectors."""
    chosen = settings.deletion_vectors
    return chosen if isinstance(chosen, bool) else table in chosen


def table_properties(settings: SinkSettings, table: str) -> dict[str, str]:
    """The Delta table properties the table ``table`` (``schema.table``) is created with."""
    if uses_deletion_vectors(settings, table):
        return {DELETION_VECTORS_PROPERTY: "true"}
    return {}


def warn_if_without_deletion_vectors(settings: SinkSettings, path: str) -> None:
    """Warn when the table at ``path`` is listed in ``sink.deletion_vectors`` but was created
    without them: the setting acts only when a table is created (the module docstring).

    Reads the table's properties with delta-rs; a table it cannot read is left alone.
    """
    if not settings.deletion_vectors:
        return
    names = table_of_path(settings.path, path)
    if names is None or not uses_deletion_vectors(settings, f"{names[0]}.{names[1]}"):
        return
    try:
        configuration = table_configuration(path)
    except Exception:
        return
    if configuration.get(DELETION_VECTORS_PROPERTY) != "true":
        log.warning(
            "a table sink.deletion_vectors lists was created without deletion vectors; its "
            "MERGEs stay copy-on-write",
            table=f"{names[0]}.{names[1]}",
            table_path=path,
            fix="drop the Delta table and take a new snapshot to recreate it with them",
        )
