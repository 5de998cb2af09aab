"""Steps: one table and one planned step in, one Delta write out.

``executor`` is the contract every step executor keeps (``apply(TableTarget, step) ->
StepOutcome``); ``step_truncate``, ``step_keyed`` (MERGE), ``step_append`` (keys that
cannot be in the table), ``step_keyless`` and ``step_history`` (the table's change
history) apply the steps; ``follow`` makes a table follow its changed relation before a
step of the new shape is written; ``writer.TableWriter`` writes one table of a batch:
makes it ready, hands each step to its executor, then its change history.

May import: sink.base, sink.constants, sink.settings, sink.values, sink.planning,
sink.engine, sink.lake, sink.records
"""
