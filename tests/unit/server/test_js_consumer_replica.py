"""The leader's side of a clustered consumer (ConsumerReplica with its ConsumerRuntime),
over a stand-in RAFT node whose proposals the test settles: what a refused or dropped
Delivered entry does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jetraft.jetstream.consumer import (
    Acked,
    ConsumerCore,
    Delivered,
    Nakked,
    Start,
    decode_entries,
    encode_entries,
    encode_entry,
)
from jetraft.jetstream.consumer import Entry as ConsumerEntry
from jetraft.jetstream.consumer_config import ConsumerConfig
from jetraft.jetstream.meta import ConsumerAssignment, StreamAssignment
from jetraft.jetstream.stream import StoreMsg
from jetraft.raft.driver import Applied
from jetraft.raft.ready import ProposalDropped
from jetraft.raft.types import Entry, EntryKind
from jetraft.server.core.internal import InternalClient
from jetraft.server.js.clustered import consumer_replica
from jetraft.server.js.clustered.consumer_replica import ConsumerReplica
from jetraft.server.js.clustered.stream_replica import StreamReplica
from jetraft.server.js.consumer_runtime import ConsumerRuntime
from tests.unit.server.test_js_replica_streams import CFG, _entry, _Host


class _Node:
    """Takes proposals and keeps them until the test settles them."""

    def __init__(self) -> None:
        self.is_leader = True
        self.proposed: list[tuple[bytes, asyncio.Future[Applied]]] = []

    def propose_nowait(self, data: bytes, *, timeout_s: float | None = None) -> Any:
        fut: asyncio.Future[Applied] = asyncio.get_running_loop().create_future()
        self.proposed.append((data, fut))
        return fut


def entries(blob: bytes) -> list[ConsumerEntry]:
    return decode_entries(blob)


class _Leader:
    def __init__(self, tmp_path: Path, msgs: int) -> None:
        host = self.host = _Host(tmp_path)
        sa = StreamAssignment("$G", CFG, "S-R3F-x", ("a", "b", "c"), 1)
        stream = host.stream_replicas[("$G", "S")] = StreamReplica(host, sa, joining=False)
        for i in range(1, msgs + 1):
            stream.apply(_entry(i, StoreMsg("s", "", None, b"m%d" % i, i)))
        cfg = ConsumerConfig(durable_name="C", ack_policy="explicit", ack_wait=30_000_000_000)
        ca = ConsumerAssignment("$G", "S", "C", cfg, "C-R3F-y", ("a", "b", "c"), 1)
        self.replica = ConsumerReplica(host, ca, stream, host.account, joining=False)
        # Started (its group not running here: nothing serves on that), then leading.
        self.replica.apply(Entry(1, 1, EntryKind.NORMAL, encode_entry(Start(1))))
        self.node = _Node()
        self.replica.group.node = self.node  # type: ignore[assignment]
        self.rt = ConsumerRuntime(consumer_replica._Owner(self.replica), self.replica.core,
                                  self.replica)
        self.replica.runtime = self.rt
        self.rt.start()
        self.got: list[bytes] = []
        self.ack_subjects: list[str] = []
        self.answers: list[str] = []
        self.client = InternalClient(host.router, host.account, "puller")
        self.client.subscribe("inbox", self._on_msg)
        self.client.subscribe("answer.*", lambda s, r, h, d: self.answers.append(s))

    def _on_msg(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        self.got.append(data)
        assert reply is not None
        self.ack_subjects.append(reply)

    def pull(self, batch: int) -> None:
        self.rt.pull_request("inbox", b'{"batch": %d, "expires": 5000000000}' % batch)

    def delivered(self) -> list[tuple[Delivered, asyncio.Future[Applied]]]:
        out = []
        for blob, fut in self.node.proposed:
            out.extend((e, fut) for e in entries(blob) if isinstance(e, Delivered))
        return out

    def commit(self, fut: asyncio.Future[Applied], blob: bytes) -> None:
        self.replica.apply(Entry(1, 2, EntryKind.NORMAL, blob))
        fut.set_result(Applied(2, None))

    async def delivered_and_committed(self, n: int) -> None:
        self.pull(n)
        await _until(lambda: len(self.got) == n and len(self.node.proposed) == 1, "deliveries")
        blob, fut = self.node.proposed[0]
        self.commit(fut, blob)


async def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"timed out waiting for {what}")


async def test_deliveries_dropped_by_the_group_go_out_again(tmp_path: Path) -> None:
    """A step-down's leadership transfer drops every proposal until it ends; when it
    expires the leader leads on, and must hand out again what it handed out meanwhile
    (cluster simulator seed 290: messages never delivered again)."""
    lead = _Leader(tmp_path, 3)
    lead.pull(1)
    await _until(lambda: len(lead.got) == 1, "a delivery")
    await _until(lambda: len(lead.node.proposed) == 1, "its proposal")
    lead.commit(lead.node.proposed[0][1], lead.node.proposed[0][0])
    lead.pull(2)
    await _until(lambda: len(lead.got) == 3, "two more deliveries")
    await _until(lambda: len(lead.node.proposed) == 2, "their proposal")
    assert [d.sseq for d, _ in lead.delivered()] == [1, 2, 3]
    lead.node.proposed[1][1].set_exception(ProposalDropped("leadership transfer to b"))
    lead.pull(3)
    await _until(lambda: len(lead.got) == 5, "two deliveries again")
    assert lead.got == [b"m1", b"m2", b"m3", b"m2", b"m3"]
    await _until(lambda: len(lead.node.proposed) == 3, "their proposal")
    assert [d.sseq for d, _ in lead.delivered()[3:]] == [2, 3]


async def test_a_delivery_refused_at_once_goes_out_again(tmp_path: Path) -> None:
    lead = _Leader(tmp_path, 2)
    lead.node.is_leader = False  # the group refuses: leadership is gone (for a moment)
    lead.pull(1)
    await _until(lambda: len(lead.got) == 1, "a delivery")
    assert not lead.node.proposed
    lead.node.is_leader = True
    lead.pull(2)
    await _until(lambda: len(lead.got) == 3, "two more deliveries")
    assert lead.got == [b"m1", b"m1", b"m2"]


async def test_a_delivery_dropped_after_the_runtime_stopped_changes_nothing(
    tmp_path: Path,
) -> None:
    lead = _Leader(tmp_path, 2)
    lead.pull(2)
    await _until(lambda: len(lead.got) == 2, "two deliveries")
    lead.rt.stop(deleted=False, leadership=True)
    lead.replica.runtime = None
    cursor = lead.replica.core.sseq
    for _, fut in lead.node.proposed:
        fut.set_exception(ProposalDropped("leadership lost"))
    await asyncio.sleep(0)
    assert lead.replica.core.sseq == cursor == 3


async def test_acks_of_one_loop_turn_are_one_proposal_answered_once_committed(
    tmp_path: Path,
) -> None:
    lead = _Leader(tmp_path, 3)
    await lead.delivered_and_committed(3)
    for i, subject in enumerate(lead.ack_subjects):  # one read's acks, sent as requests
        lead.client.publish(subject, b"+ACK", reply=f"answer.{i}")
    await _until(lambda: len(lead.node.proposed) == 2, "the acks' proposal")
    blob, fut = lead.node.proposed[1]
    assert [type(e).__name__ for e in entries(blob)] == ["Acked"] * 3
    await asyncio.sleep(0.01)  # a bounded negative wait: nothing committed, nothing answered
    assert lead.answers == []
    lead.commit(fut, blob)
    await _until(lambda: len(lead.answers) == 3, "three answers")
    assert sorted(lead.answers) == ["answer.0", "answer.1", "answer.2"]
    assert not lead.replica.core.state.pending


async def test_acks_whose_proposal_is_dropped_are_not_answered(tmp_path: Path) -> None:
    lead = _Leader(tmp_path, 2)
    await lead.delivered_and_committed(2)
    for i, subject in enumerate(lead.ack_subjects):
        lead.client.publish(subject, b"", reply=f"answer.{i}")
    await _until(lambda: len(lead.node.proposed) == 2, "the acks' proposal")
    lead.node.proposed[1][1].set_exception(ProposalDropped("leadership lost"))
    # A later ack, its own proposal committed: answered; the dropped ones never are.
    lead.client.publish(lead.ack_subjects[0], b"", reply="answer.again")
    await _until(lambda: len(lead.node.proposed) == 3, "the next proposal")
    lead.commit(lead.node.proposed[2][1], lead.node.proposed[2][0])
    await _until(lambda: lead.answers == ["answer.again"], "the later answer")
    await asyncio.sleep(0.01)
    assert lead.answers == ["answer.again"]


def test_a_replica_applies_a_batch_with_runs_of_acks_as_entries_one_by_one(
    tmp_path: Path,
) -> None:
    """A replica applies the acks in a committed batch together (``apply_explicit_acks``):
    the state, and the sequences it hands the stream, are those of applying each entry."""
    host = _Host(tmp_path)
    sa = StreamAssignment("$G", CFG, "S-R3F-x", ("a", "b", "c"), 1)
    stream = StreamReplica(host, sa, joining=False)
    cfg = ConsumerConfig(durable_name="C", ack_policy="explicit", ack_wait=30_000_000_000)
    ca = ConsumerAssignment("$G", "S", "C", cfg, "C-R3F-y", ("a", "b", "c"), 1)
    replica = ConsumerReplica(host, ca, stream, host.account, joining=False)
    reference = ConsumerCore("S", "C", replica.core.cfg, created_ns=1)
    batch: list[ConsumerEntry] = [Start(1)]
    batch += [Delivered(i, i, 1, 100 + i) for i in range(1, 9)]
    batch += [Acked(2, 2), Acked(1, 1), Acked(4, 4), Acked(9, 9)]  # 9: not delivered
    batch += [Nakked(5, 7, delayed=False), Acked(5, 5), Delivered(9, 9, 1, 200)]
    batch += [Acked(3, 3), Acked(9, 9), Acked(3, 3), Acked(6, 6, term=True)]
    done = replica.apply(Entry(1, 1, EntryKind.NORMAL, encode_entries(batch)))
    want: list[int] = []
    for e in batch:
        want += reference.apply(e)
    assert done == want
    got, ref = replica.core.state, reference.state
    assert (got.delivered, got.ack_floor) == (ref.delivered, ref.ack_floor)
    assert got.pending == ref.pending and got.redelivered == ref.redelivered
    assert sorted(got.pending) == [7, 8]
