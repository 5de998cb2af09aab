"""Copies: tables copied from the source - the initial snapshot and copies while streaming.

Owns which tables are being copied and what the stream does with their changes
(``copies``), the copied rows as Arrow without per-row objects (``bulk``), the bulk append
step that writes them (``step_bulk``), the snapshot's bulk path (``snapshot.BulkLoader``,
which prepares a table as the steps' writer does) and copies while streaming
(``online.OnlineCopies``): the objects capture holds beside the sink.

May import: sink.base, sink.constants, sink.settings, sink.values, sink.planning,
sink.engine, sink.lake, sink.records, sink.steps
"""
