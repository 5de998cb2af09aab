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

from sink.settings import SinkSettings

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
