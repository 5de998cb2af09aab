"""Records: the lake's own tables, written next to the data they describe.

Owns the commit log that ``wal2delta cut`` reads (``commits``), the bookkeeping tables -
snapshot markers, column origins, logical decoding messages (``bookkeeping``) - the
rejects table with the exact text of values stored under a convention (``rejects``), what
the lake records of each batch (``batches``) and the server timeline it follows
(``timeline``). Each table's change history is written by its step executor
(``steps/step_history.py``).

May import: sink.base, sink.constants, sink.settings, sink.values, sink.planning,
sink.engine, sink.lake
"""
