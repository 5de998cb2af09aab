"""The schema state of one replication stream: RELATION and TYPE messages by OID.

pgoutput sends a relation's RELATION message (and TYPE messages for its user-defined
column types) before the first change that needs it, and again after the relation
changed; changes then refer to it by OID only. The cache is per stream: a new connection
starts empty and the server sends every schema again.

Which messages reach the cache, and when, is the assembler's business (see its theory of
operation): they are applied at replay, in commit order, so that an aborted streamed
transaction's schema never reaches it. Entries are stored with ``xid=None``: the xid prefix
only says which (sub)transaction carried the message, and keeping it would make two
identical schemas compare unequal.
"""

from __future__ import annotations

import dataclasses

from decoder.lsn import Oid
from decoder.messages import Relation, Type


class RelationCache:
    """Relations and types by OID, as the last applied RELATION/TYPE message described."""

    def __init__(self) -> None:
        self._relations: dict[int, Relation] = {}
        self._types: dict[int, Type] = {}

    def apply(self, message: Relation | Type) -> None:
        """Record a RELATION or TYPE message, replacing what was known for its OID."""
        if isinstance(message, Relation):
            stored = message if message.xid is None else dataclasses.replace(message, xid=None)
            self._relations[message.relation_id] = stored
        else:
            stored_type = message if message.xid is None else dataclasses.replace(message, xid=None)
            self._types[message.type_oid] = stored_type

    def relation(self, relation_id: int) -> Relation | None:
        """Return the relation with this OID, or None if no RELATION message named it."""
        return self._relations.get(relation_id)

    @property
    def by_id(self) -> dict[int, Relation]:
        """The relations by OID: the cache's own dict, for the replay loop to read once per
        change without a method call, in Python and in C (``replay.ReplayQueue._chunks``);
        never change it."""
        return self._relations

    def type(self, type_oid: int) -> Type | None:
        """Return the user type with this OID, or None if no TYPE message named it."""
        return self._types.get(type_oid)

    @property
    def relation_ids(self) -> frozenset[Oid]:
        """The OIDs of every known relation."""
        return frozenset(Oid(relation_id) for relation_id in self._relations)

    def __len__(self) -> int:
        return len(self._relations)
