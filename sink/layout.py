"""How each Delta table is laid out when the sink creates it: its table properties.

``table_properties`` is the one place that decides them from the settings; ``DeltaSink``
passes its answer to ``LakeTables.load`` for every table it creates.
"""

from __future__ import annotations

from sink.settings import SinkSettings


def table_properties(settings: SinkSettings, table: str) -> dict[str, str]:
    """The Delta table properties the table ``table`` (``schema.table``) is created with."""
    del settings, table  # none yet
    return {}
