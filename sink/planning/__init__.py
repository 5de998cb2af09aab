"""Planning: a batch of changes folded into per-table plans, without Spark or I/O.

Owns the plan's types (``plan``), each relation's shape and identity (``shape``), the fold
(``fold``, its columnar fast path ``columnar`` and C kernel ``kernel`` / ``_columnar.c``),
keyless tables' folding (``keyless``), what a changed relation means for an existing
table (``evolution``, with the ``SourceCatalog`` port capture injects), key-range
partitions (``partitioning``), changes held back for later batches (``holdback``) and
which tables the lake cannot already hold changes of (``replays``). Pure data and pure
functions: the steps executors apply.

May import: sink.base, sink.constants, sink.settings, sink.values
"""
