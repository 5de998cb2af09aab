"""The engine gateway: the Spark session, the SQL it runs, and the Arrow it is sent.

Owns the process's Spark Connect session and the translation of Spark errors into
``SinkError`` (``spark``), the deadline on every engine and store call (``deadline``), the
one SQL renderer (``sql``) and the Arrow sources built from planned steps (``arrow``).
Nothing here knows a table's state, nor stages rows for the engine to read: that is the
lake port's.

May import: sink.base, sink.constants, sink.settings, sink.values, sink.planning
"""
