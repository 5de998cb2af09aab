"""Model check of the assembler: random interleavings against a plain-list reference model.

Hypothesis drives a ``RuleBasedStateMachine`` through ordinary transactions, stream blocks
of several interleaved streamed transactions with subtransactions, subtransaction and
top-level stream aborts, prepares (plain and streamed), COMMIT PREPARED, ROLLBACK PREPARED
and non-transactional messages. The model keeps each open transaction as a list of
(subxid, value) pairs; a subtransaction abort cuts the list at the subxid's first entry
(worker.c's rule). After every step, the values replayed from every committed transaction,
in order, must equal the model's. The same machine runs with in-memory buffers and with
``FileChangeBuffer``s that spill after a few records, so truncation on disk is covered.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from decoder import (
    Assembler,
    CommittedTransaction,
    Message,
    ProtocolOptions,
    RowChange,
    StreamStop,
    spilling_buffers,
)
from tests.support.pgoutput_builder import (
    INT4_OID,
    begin,
    begin_prepare,
    commit,
    commit_prepared,
    encode_message,
    insert,
    logical_message,
    prepare,
    relation,
    rollback_prepared,
    stream_abort,
    stream_commit,
    stream_prepare,
    stream_start,
)

OPTIONS = ProtocolOptions(4, "parallel", two_phase=True, messages=True)
REL = 1
STREAM_XIDS = (1000, 2000, 3000)
GIDS = ("g1", "g2", "g3")
values = st.integers(0, 10_000)


def _relation(xid: int | None = None) -> Message:
    return relation(REL, "t", (("id", INT4_OID, True),), xid=xid)


class AssemblerModel(RuleBasedStateMachine):
    """The assembler next to a list model of what must commit."""

    spill_limit: int | None = None

    def __init__(self) -> None:
        super().__init__()
        self.spool = Path(tempfile.mkdtemp(prefix="wal2delta-model-"))
        buffers = None
        if self.spill_limit is not None:
            buffers = spilling_buffers(self.spool, self.spill_limit)
        self.assembler = Assembler(OPTIONS, buffers=buffers)
        self.lsn = 0x1000
        self.next_plain_xid = 10
        self.streams: dict[int, list[tuple[int, int]]] = {}
        self.prepared: dict[str, tuple[int, list[int]]] = {}
        self.expected: list[list[int]] = []
        self.actual: list[list[int]] = []

    def teardown(self) -> None:
        shutil.rmtree(self.spool, ignore_errors=True)

    # ------------------------------------------------------------------------ helpers

    def _feed(self, *messages: Message) -> None:
        for message in messages:
            self.lsn += 0x10
            for output in self.assembler.feed(self.lsn, encode_message(message, OPTIONS)):
                if isinstance(output, CommittedTransaction):
                    changes = list(self.assembler.replay(output))
                    assert len(changes) == output.change_count
                    self.actual.append(
                        [
                            int(change.new.values[0].data or b"")
                            for change in changes
                            if isinstance(change, RowChange) and change.new is not None
                        ]
                    )

    def _plain_xid(self) -> int:
        self.next_plain_xid += 1
        return self.next_plain_xid

    def _held_xids(self) -> set[int]:
        return {xid for xid, _ in self.prepared.values()}

    # -------------------------------------------------------------------------- rules

    @rule(rows=st.lists(values, max_size=3))
    def plain_transaction(self, rows: list[int]) -> None:
        xid = self._plain_xid()
        final = self.lsn + 0x1000
        self._feed(
            begin(xid, final),
            _relation(),
            *(insert(REL, str(value)) for value in rows),
            commit(final),
        )
        self.expected.append(rows)

    @rule(
        xid=st.sampled_from(STREAM_XIDS),
        rows=st.lists(st.tuples(st.integers(0, 3), values), max_size=4),
    )
    def stream_block(self, xid: int, rows: list[tuple[int, int]]) -> None:
        if xid in self._held_xids():
            return
        first = xid not in self.streams
        messages: list[Message] = [stream_start(xid, first_segment=first)]
        if first:
            self.streams[xid] = []
            messages.append(_relation(xid))
        for offset, value in rows:
            messages.append(insert(REL, str(value), xid=xid + offset))
            self.streams[xid].append((xid + offset, value))
        messages.append(StreamStop())
        self._feed(*messages)

    @precondition(lambda self: self.streams)
    @rule(data=st.data(), offset=st.integers(1, 3))
    def abort_subtransaction(self, data: st.DataObject, offset: int) -> None:
        xid = data.draw(st.sampled_from(sorted(self.streams)))
        subxid = xid + offset
        self._feed(stream_abort(xid, subxid, abort_lsn=self.lsn))
        entries = self.streams[xid]
        first = next((i for i, (sub, _) in enumerate(entries) if sub == subxid), None)
        if first is not None:
            del entries[first:]

    @precondition(lambda self: self.streams)
    @rule(data=st.data())
    def abort_streamed_transaction(self, data: st.DataObject) -> None:
        xid = data.draw(st.sampled_from(sorted(self.streams)))
        self._feed(stream_abort(xid, xid, abort_lsn=self.lsn))
        del self.streams[xid]

    @precondition(lambda self: self.streams)
    @rule(data=st.data())
    def commit_streamed_transaction(self, data: st.DataObject) -> None:
        xid = data.draw(st.sampled_from(sorted(self.streams)))
        self._feed(stream_commit(xid, self.lsn + 0x100))
        self.expected.append([value for _, value in self.streams.pop(xid)])

    @precondition(lambda self: self.streams and len(self.prepared) < len(GIDS))
    @rule(data=st.data())
    def prepare_streamed_transaction(self, data: st.DataObject) -> None:
        xid = data.draw(st.sampled_from(sorted(self.streams)))
        gid = data.draw(st.sampled_from([g for g in GIDS if g not in self.prepared]))
        self._feed(stream_prepare(xid, gid, self.lsn + 0x100))
        self.prepared[gid] = (xid, [value for _, value in self.streams.pop(xid)])

    @precondition(lambda self: len(self.prepared) < len(GIDS))
    @rule(data=st.data(), rows=st.lists(values, max_size=3))
    def prepare_plain_transaction(self, data: st.DataObject, rows: list[int]) -> None:
        gid = data.draw(st.sampled_from([g for g in GIDS if g not in self.prepared]))
        xid = self._plain_xid()
        lsn = self.lsn + 0x1000
        self._feed(
            begin_prepare(xid, gid, lsn),
            _relation(),
            *(insert(REL, str(value)) for value in rows),
            prepare(xid, gid, lsn),
        )
        self.prepared[gid] = (xid, rows)

    @precondition(lambda self: self.prepared)
    @rule(data=st.data())
    def commit_prepared_transaction(self, data: st.DataObject) -> None:
        gid = data.draw(st.sampled_from(sorted(self.prepared)))
        xid, rows = self.prepared.pop(gid)
        self._feed(commit_prepared(xid, gid, self.lsn + 0x100))
        self.expected.append(rows)

    @precondition(lambda self: self.prepared)
    @rule(data=st.data())
    def rollback_prepared_transaction(self, data: st.DataObject) -> None:
        gid = data.draw(st.sampled_from(sorted(self.prepared)))
        xid, _ = self.prepared.pop(gid)
        self._feed(rollback_prepared(xid, gid, self.lsn, self.lsn + 0x100))

    @rule(content=st.binary(max_size=8))
    def non_transactional_message(self, content: bytes) -> None:
        self._feed(logical_message("model", content, transactional=False, lsn=self.lsn))

    # ---------------------------------------------------------------------- invariants

    @invariant()
    def committed_output_equals_the_model(self) -> None:
        assert self.actual == self.expected

    @invariant()
    def open_and_held_counts_equal_the_model(self) -> None:
        assert self.assembler.open_streamed_transactions == len(self.streams)
        assert self.assembler.prepared_transactions == len(self.prepared)
        assert self.assembler.idle == (not self.streams)

    @invariant()
    def spool_files_exist_only_while_something_is_spilled(self) -> None:
        if self.assembler.spilled_bytes == 0:
            assert list(self.spool.iterdir()) == []


class SpillingAssemblerModel(AssemblerModel):
    """The same model with buffers that spill to disk after about two records."""

    spill_limit = 64


# Half the profile's examples each: two machines, and every step feeds several messages.
_SETTINGS = settings(max_examples=max(settings().max_examples // 2, 10), stateful_step_count=40)
TestAssemblerAgainstModel = AssemblerModel.TestCase
TestAssemblerAgainstModel.settings = _SETTINGS
TestSpillingAssemblerAgainstModel = SpillingAssemblerModel.TestCase
TestSpillingAssemblerAgainstModel.settings = _SETTINGS
