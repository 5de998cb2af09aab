"""PostgreSQL's text form of a value: printed from its binary form, or from the Python value
psycopg loaded - one printer for both, its modules by family.

Theory of operation
-------------------
The sink stores every type Delta has no faithful equivalent for as a STRING holding
PostgreSQL's text form - exactly what pgoutput's text mode sends, i.e. what the type's
output function prints. With ``binary true`` the same value arrives in the type's send
format instead, so binary mode must print those bytes the way the output function would,
or the two modes would give different Delta tables. This package does that, as a table of
pure functions ``bytes -> str`` (``Reader``), one per type:

* **Builtin leaves** (``BUILTIN_LEAVES``): ports of the output functions of the
  builtin types whose binary layout is fixed: bool ``t``/``f``, bytea as ``\\x`` hex,
  integers, ``float4``/``float8`` as the shortest digits that read back to the same value
  (``extra_float_digits = 1``, PostgreSQL's default since 12), numeric with its display
  scale, dates and timestamps (``infinity``, years past 9999 and ``BC`` included), time,
  timetz, interval, uuid, inet/cidr (``inet_net_ntop``, IPv4-mapped IPv6 included), MAC
  addresses, bit strings, geometric types, pg_lsn, tid, xid, json/jsonb/jsonpath, xml,
  int2vector/oidvector and txid/pg snapshots.
* **Containers**, whose layout wraps other values: ``array_text`` (``array_send``:
  dimensions, lower bounds, NULL flag, element OID, elements; printed as ``array_out``
  does, with the element type's delimiter), ``record_text`` (``record_send``: for each
  field its type OID and value; printed as ``record_out``), ``range_text`` and
  ``multirange_text`` (``range_send``'s flags and bounds; ``range_out``). A container
  prints each inner value with the reader of that value's type, so builtin containers of
  builtin leaves (``int4[]``, ``box[]``, ``tstzrange``...) need nothing else:
  ``builtin_text_reader`` resolves them from psycopg's registry of builtin types. User
  types (enums, domains, composites, their arrays) need the source catalog:
  ``decoder.usertypes`` describes them and reuses the functions here.
* **Python values** (``value_text``): where the sink has a value psycopg loaded instead of
  bytes, it prints it with the same families' printers - the same float digits, date and
  time forms, address forms, and the same quoting of array elements and range bounds - so
  one value has one text form whichever way it came.

The modules, by family: ``numeric`` (integers, float4/float8, numeric, money),
``datetime`` (date, time, timetz, timestamp, timestamptz, interval), ``network`` (inet,
cidr, macaddr), ``geometric`` (point, lseg, box, path, polygon, line, circle),
``containers`` (arrays, records, ranges, multiranges: the quoting, once), ``misc`` (bool,
bytea, "char", text-like types, uuid, bits, pg_lsn, tid, snapshots, vectors); ``base``
holds what they share, ``builtin`` the table of builtin types and ``loaded`` the printer
of Python values.

Settings: the output functions print some types by session settings. The ports follow
PostgreSQL's defaults, which is what a walsender started without options prints in text
mode: ``DateStyle ISO``, ``IntervalStyle postgres``, ``bytea_output hex``,
``extra_float_digits 1`` - and ``TimeZone UTC`` for timestamptz and timetz, which the
binary form does not carry (timestamptz is an instant; it prints as ``+00``), and
``lc_monetary C`` for money (``-$1,234.50``). The daemon's connections set exactly these
(``capture.settings.TEXT_FORM_SETTINGS``), so text mode prints the same. A type whose text
form depends on something the binary form lacks - the ``reg*`` types (names looked up by
OID) - has no reader: its values stop the sink with ``UnknownBinaryFormatError`` rather
than being stored differently from text mode.

Every reader raises ``ValueError``/``struct.error``/``IndexError`` for bytes PostgreSQL
never sends (a wrong length, an unknown flag) instead of guessing.
"""

from decoder.textforms.base import Reader, ReaderLookup, UnknownBinaryFormatError
from decoder.textforms.builtin import (
    BOX_OID,
    BUILTIN_LEAVES,
    BUILTIN_UNREADABLE,
    builtin_text_reader,
    builtin_type_name,
    element_delimiter,
    require_builtin_reader,
)
from decoder.textforms.containers import array_text, multirange_text, range_text, record_text
from decoder.textforms.datetime import format_interval, time_of_day, utc_offset
from decoder.textforms.loaded import value_text
from decoder.textforms.numeric import float4_text, float8_text

__all__ = [
    "BOX_OID",
    "BUILTIN_LEAVES",
    "BUILTIN_UNREADABLE",
    "Reader",
    "ReaderLookup",
    "UnknownBinaryFormatError",
    "array_text",
    "builtin_text_reader",
    "builtin_type_name",
    "element_delimiter",
    "float4_text",
    "float8_text",
    "format_interval",
    "multirange_text",
    "range_text",
    "record_text",
    "require_builtin_reader",
    "time_of_day",
    "utc_offset",
    "value_text",
]
