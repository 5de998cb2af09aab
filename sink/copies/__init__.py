"""Copies: tables copied from the source - the initial snapshot and copies while streaming.

Owns which tables are being copied and what the stream does with their changes
(``copies``), the copied rows as Arrow without per-row objects (``bulk``), and the bulk
append step that writes them (``step_bulk``).

May import: sink.base, sink.constants, sink.settings, sink.values, sink.planning,
sink.engine, sink.lake, sink.records
"""
