"""Records: the lake's own tables, written next to the data they describe.

Owns the commit log that ``wal2delta cut`` reads and the timeline the lake follows
(``commits``), the bookkeeping tables - snapshot markers, column origins, logical decoding
messages (``bookkeeping``) - the rejects table with the exact text of values stored under a
convention (``rejects``), and each table's change history (``history``).

May import: sink.base, sink.constants, sink.settings, sink.values, sink.planning,
sink.engine, sink.lake
"""
