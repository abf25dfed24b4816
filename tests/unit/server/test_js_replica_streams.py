"""What a clustered replica's state machine starts from and reads: a stream replica
starts with the config its group started with, a consumer replica reads the stream
replica its server has now. Each case is one the cluster simulator found the server
getting wrong (``jetraft.sim.cluster.fixes``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

from jetraft.jetstream.consumer_config import ConsumerConfig
from jetraft.jetstream.meta import ConsumerAssignment, StreamAssignment
from jetraft.jetstream.stream import PubAck, StoreMsg, UpdateConfig, encode_entry
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.raft.types import Entry, EntryKind
from jetraft.server.js.clustered import consumer_replica
from jetraft.server.js.clustered.consumer_replica import ConsumerReplica
from jetraft.server.js.clustered.stream_replica import StreamReplica
from tests.unit.server.test_js_reconcile_members import _ReplicaHost


class _Host(_ReplicaHost):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.stream_replicas: dict[tuple[str, str], StreamReplica] = {}

    def stream_replica(self, account: str, name: str) -> StreamReplica | None:
        return self.stream_replicas.get((account, name))

    def retire(self, account: str, stream: str, seqs: Sequence[int]) -> None:
        pass

    def delete_consumer(self, account: str, stream: str, name: str) -> None:
        pass


CFG = StreamConfig(name="S", subjects=("s",), max_msg_size=100)


def _entry(index: int, e: StoreMsg | UpdateConfig) -> Entry:
    return Entry(1, index, EntryKind.NORMAL, encode_entry(e))


def test_a_stream_replica_replays_its_group_under_the_config_it_started_with(
    tmp_path: Path,
) -> None:
    # The group stored a 50-byte message, then lowered max_msg_size to 10; a replica
    # joining later (no snapshot) replays both entries and must store that message too.
    smaller = msgspec.structs.replace(CFG, max_msg_size=10)
    sa = StreamAssignment("$G", smaller, "S-R3F-x", ("a", "b", "c"), 1, initial_config=CFG)
    replica = StreamReplica(_Host(tmp_path), sa, joining=True)
    assert replica.stream.config == CFG
    stored = replica.apply(_entry(1, StoreMsg("s", "", None, b"x" * 50, 1)))
    assert isinstance(stored, PubAck) and stored.seq == 1
    replica.apply(_entry(2, UpdateConfig(smaller)))
    assert replica.stream.config == smaller
    assert replica.stream.store.state().msgs == 1


def test_a_consumer_replica_reads_the_stream_replica_its_server_has_now(
    tmp_path: Path,
) -> None:
    host = _Host(tmp_path)
    sa = StreamAssignment("$G", CFG, "S-R3F-x", ("a", "b", "c"), 1)
    ca = ConsumerAssignment("$G", "S", "C", ConsumerConfig(durable_name="C"), "C-R3F-y",
                            ("a", "b", "c"), 1)
    old = host.stream_replicas[("$G", "S")] = StreamReplica(host, sa, joining=False)
    consumer = ConsumerReplica(host, ca, old, host.account, joining=False)
    assert consumer.stream is old and old.stream.consumers["C"] is consumer
    # The server left the stream (its replica destroyed) and came back: a new replica.
    new = host.stream_replicas[("$G", "S")] = StreamReplica(host, sa, joining=True)
    new.apply(_entry(1, StoreMsg("s", "", None, b"hello", 1)))
    owner = consumer_replica._Owner(consumer)
    assert owner.source() is new.stream.store
    assert consumer.stream is new
    assert new.stream.consumers["C"] is consumer and "C" not in old.stream.consumers
