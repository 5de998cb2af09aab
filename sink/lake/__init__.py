"""The lake port: every call that reads or writes a Delta table goes through here.

``tables.LakeTables`` runs the engine's statements on tables and keeps each table's
``TableState`` (its columns, the relation it follows), staging a statement's rows in the
local Parquet files the embedded engine reads (``sources``); ``deltars`` is the one module that
calls delta-rs (``deltalake``): the snapshot's appends, table versions and history,
compaction, file lists and log commits; ``deltalog`` reads a table's file actions from its
log, ``logversion`` a local table's newest version from its log's names, ``layout`` the
properties a new table gets, and ``adoption`` commits an online copy's files to its table.

May import: sink.base, sink.constants, sink.settings, sink.values, sink.planning, sink.engine
"""
