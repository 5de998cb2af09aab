"""Steps: one table and one planned step in, one Delta write out.

``executor`` is the contract every step executor keeps (``apply(TableTarget, step) ->
StepOutcome``) and the choice of executor for a step; ``step_truncate``, ``step_keyed``
(MERGE), ``step_append`` (keys that cannot be in the table) and ``step_keyless`` apply the
steps; ``follow`` makes a table follow its changed relation before a step of the new shape
is written; ``writer.TableWriter`` writes one table of a batch: makes it ready, hands each
step to its executor, appends its change history.

May import: sink.base, sink.constants, sink.settings, sink.values, sink.planning,
sink.engine, sink.lake, sink.records
"""
