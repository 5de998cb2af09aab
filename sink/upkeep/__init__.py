"""Upkeep: work on tables between batches - compaction, deletion-vector purges, retention,
log trimming.

``compaction`` compacts and purges the tables a batch wrote, within a time budget;
``retention`` vacuums each table's old files, keeping every version a cut can name;
``logtrim`` deletes each table's log files of versions older than those kept readable;
``turns`` says when each table's next vacuum or trim is due.

May import: sink.base, sink.constants, sink.settings, sink.values, sink.planning,
sink.engine, sink.lake, sink.records
"""
