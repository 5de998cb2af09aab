"""Values: what a PostgreSQL column and its values become in Delta.

Owns the type mapping (``typemap``: PostgreSQL types to Delta and Arrow types, and
``PlanColumn``, one source column as Delta sees it), the conversion of sent values
(``convert``, vectorised text casts in ``textcast``), the conventions for legal values a
Delta type cannot hold (``unrepresentable``), how values compare when rows are matched
(``matching``), and where a table lands in the lake and what its columns are called
(``naming``). Pure: no engine, no store.

May import: sink.base, sink.constants, sink.settings
"""
