"""Upkeep: work on tables between batches - compaction, deletion-vector purges, retention.

``compaction`` compacts and purges the tables a batch wrote, within a time budget;
``retention`` vacuums each table's old files, keeping every version a cut can name.

May import: sink.base, sink.constants, sink.settings, sink.values, sink.planning,
sink.engine, sink.lake, sink.records
"""
