"""The meta group's state machine: which streams and consumers exist and where they live.

Deterministic, like the stream and consumer state machines: every JetStream server of a
cluster applies the same entries in the same order and ends with the same assignments.
The meta leader decides (validation, placement) and proposes; applying never decides
anything that could differ between servers.

* ``StreamAssignment``: a stream of an account, its config, its RAFT group's name and the
  servers that hold it (the first is the preferred leader at creation), and the config
  its group started with once it changed (``first_config``: what a replica replaying the
  log from the start must begin with).
* ``ConsumerAssignment``: a consumer of a stream, placed on servers of its stream.

Entries: ``AssignStream`` (create, or replace: a config update, a peer change),
``RemoveStream``, ``AssignConsumer``, ``RemoveConsumer``. ``apply`` returns what changed so
the server can start, reshape or stop its local replicas. A stream whose servers change
takes its consumers along in the same apply (see ``MetaState._follow``).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from jetraft.jetstream.consumer_config import ConsumerConfig
from jetraft.jetstream.stream_config import StreamConfig


class StreamAssignment(msgspec.Struct, frozen=True, array_like=True):
    account: str
    config: StreamConfig
    group: str
    peers: tuple[str, ...]
    created_ns: int
    # The config the stream's group started with, once it has another (set by apply): a
    # replica that replays the group's log from its first entry must start with it, as
    # the entries before an UpdateConfig were applied under it.
    initial_config: StreamConfig | None = None
    # The meta log index at which each of `peers` was placed (set by apply; () in
    # assignments proposed, and in snapshots written before it existed). See `placed_at`.
    placed: tuple[int, ...] = ()

    @property
    def first_config(self) -> StreamConfig:
        """What a replica's stream starts with before it applies the group's log."""
        return self.initial_config if self.initial_config is not None else self.config

    @property
    def name(self) -> str:
        return self.config.name


class ConsumerAssignment(msgspec.Struct, frozen=True, array_like=True):
    account: str
    stream: str
    name: str
    config: ConsumerConfig
    group: str
    peers: tuple[str, ...]
    created_ns: int
    placed: tuple[int, ...] = ()  # as StreamAssignment.placed


class AssignStream(msgspec.Struct, frozen=True, tag="sa", array_like=True):
    sa: StreamAssignment
    # A change of an existing stream (config, servers), not a create: applied only if the
    # stream still exists with that group (a delete ordered before it wins; without this
    # an update planned before the delete was applied made the stream again, empty).
    update: bool = False


class RemoveStream(msgspec.Struct, frozen=True, tag="rs", array_like=True):
    account: str
    name: str


class AssignConsumer(msgspec.Struct, frozen=True, tag="ca", array_like=True):
    ca: ConsumerAssignment


class RemoveConsumer(msgspec.Struct, frozen=True, tag="rc", array_like=True):
    account: str
    stream: str
    name: str


MetaEntry = AssignStream | RemoveStream | AssignConsumer | RemoveConsumer

_encoder = msgspec.msgpack.Encoder()
_entry_decoder = msgspec.msgpack.Decoder(MetaEntry)


def encode_entry(entry: MetaEntry) -> bytes:
    return _encoder.encode(entry)


def decode_entry(blob: bytes) -> MetaEntry:
    entry: MetaEntry = _entry_decoder.decode(blob)
    return entry


StreamKey = tuple[str, str]  # (account, stream)
ConsumerKey = tuple[str, str, str]  # (account, stream, consumer)
Assignment = StreamAssignment | ConsumerAssignment


def placed_at(a: Assignment, server: str) -> int:
    """The meta log index of the entry that placed `server` in this assignment (0: not
    known, for a state restored from a snapshot older than the record). A server tells
    by it whether it carried out its placement before a restart, which an assignment
    that reaches it in a snapshot does not say otherwise."""
    if server in a.peers and len(a.placed) == len(a.peers):
        return a.placed[a.peers.index(server)]
    return 0


def joined_late(a: Assignment, server: str) -> bool:
    """Whether `server` was placed after the group began (a scale-up or a replacement):
    its replica joins the existing group rather than starting it."""
    mine = placed_at(a, server)
    return mine > 0 and mine > min(a.placed)


def _placed(old: Assignment | None, peers: tuple[str, ...], index: int) -> tuple[int, ...]:
    """The placement indexes of `peers`: kept for those `old` already had (0 stays 0:
    not known, so taken as carried out), `index` for the others."""
    return tuple(placed_at(old, p) if old is not None and p in old.peers else index
                 for p in peers)


@dataclass(frozen=True, slots=True)
class StreamChanged:
    """A stream was assigned or reassigned (``old`` None: new), or removed (``new`` None).
    Removing a stream removes its consumers (their removals are reported first)."""

    key: StreamKey
    old: StreamAssignment | None
    new: StreamAssignment | None


@dataclass(frozen=True, slots=True)
class ConsumerChanged:
    key: ConsumerKey
    old: ConsumerAssignment | None
    new: ConsumerAssignment | None


Change = StreamChanged | ConsumerChanged


def carried_out(change: Change, index: int | None, done: int, server: str) -> bool:
    """Whether `server`, which carried out the meta log's changes up to index `done`
    before it started, had carried out `change`, applied from the entry at `index` or
    (None) from a snapshot. A snapshot (its own, or one its leader sent because it fell
    behind) may hold placements made while the server was down: the index that placed
    it tells (taking them as carried out started their replicas as ones that lost their
    logs, voting for nobody: cluster simulator seed 366)."""
    if index is not None:
        return index <= done
    new = change.new
    if new is None or server not in new.peers:
        return True
    return placed_at(new, server) <= done


def superseded(now: StreamAssignment | ConsumerAssignment | None,
               replayed: StreamAssignment | ConsumerAssignment) -> bool:
    """Whether an assignment replayed from the meta log on restart is one whose group the
    meta state (applied further than the replicas were made) no longer holds: deleted, or
    deleted and made again as another group, later in the log. Its replica is not
    started: its log was removed with it, so it would start as one that lost its log,
    repairing from peers that no longer run the group, until the replayed deletion
    destroyed it. The deletion's change still removes whatever of it is left on disk."""
    return now is None or now.group != replayed.group


def joins_group(change: Change, server: str) -> bool:
    """Whether `server`'s new replica joins an existing group (its leader adds it) rather
    than starting the group. A snapshot's change has no previous assignment to compare
    with: the placement indexes tell."""
    if change.old is not None:
        return server not in change.old.peers
    return change.new is not None and joined_late(change.new, server)


class _Snapshot(msgspec.Struct, array_like=True):
    streams: list[StreamAssignment]
    consumers: list[ConsumerAssignment]


_snapshot_decoder = msgspec.msgpack.Decoder(_Snapshot)


def _fit(have: tuple[str, ...], servers: tuple[str, ...], first: list[str], want: int
         ) -> tuple[str, ...]:
    """`want` of `servers`: those of `have` first, then those of `first`, then the rest."""
    peers = [p for p in have if p in servers][:want]
    for p in [*first, *servers]:
        if len(peers) >= want:
            break
        if p not in peers:
            peers.append(p)
    return tuple(peers)


class MetaState:
    def __init__(self) -> None:
        self.streams: dict[StreamKey, StreamAssignment] = {}
        self.consumers: dict[ConsumerKey, ConsumerAssignment] = {}

    def apply(self, entry: MetaEntry, index: int = 0) -> list[Change]:
        """Apply the meta log's entry at `index`, which the assignments it places servers
        in record (`placed`; 0 records nothing)."""
        if isinstance(entry, AssignStream):
            sa = entry.sa
            key = (sa.account, sa.name)
            old = self.streams.get(key)
            if entry.update and (old is None or old.group != sa.group):
                return []
            if old is not None and old.group == sa.group and sa.initial_config is None:
                first = old.first_config
                if first != sa.config:
                    sa = msgspec.structs.replace(sa, initial_config=first)
            if index:
                same = old if old is not None and old.group == sa.group else None
                sa = msgspec.structs.replace(sa, placed=_placed(same, sa.peers, index))
            self.streams[key] = sa
            moved = self._follow(old, sa, index) if old is not None else []
            return [StreamChanged(key, old, sa), *moved]
        if isinstance(entry, RemoveStream):
            key = (entry.account, entry.name)
            old = self.streams.pop(key, None)
            if old is None:
                return []
            changes: list[Change] = []
            for ck in [k for k in self.consumers if k[:2] == key]:
                changes.append(ConsumerChanged(ck, self.consumers.pop(ck), None))
            changes.append(StreamChanged(key, old, None))
            return changes
        if isinstance(entry, AssignConsumer):
            ca = entry.ca
            stream = self.streams.get((ca.account, ca.stream))
            if stream is None:
                return []  # its stream went away before this entry: nothing to assign
            if not set(ca.peers) <= set(stream.peers):
                # Planned on servers its stream has left since (a meta leader that had not
                # applied its whole log yet): the stream's servers instead, as many.
                peers = _fit(ca.peers, stream.peers, [], min(len(ca.peers), len(stream.peers)))
                ca = msgspec.structs.replace(ca, peers=peers)
            ckey = (ca.account, ca.stream, ca.name)
            prev = self.consumers.get(ckey)
            if index:
                kept = prev if prev is not None and prev.group == ca.group else None
                ca = msgspec.structs.replace(ca, placed=_placed(kept, ca.peers, index))
            self.consumers[ckey] = ca
            return [ConsumerChanged(ckey, prev, ca)]
        ckey = (entry.account, entry.stream, entry.name)
        gone = self.consumers.pop(ckey, None)
        return [ConsumerChanged(ckey, gone, None)] if gone is not None else []

    def _follow(self, old: StreamAssignment, new: StreamAssignment,
                index: int) -> list[Change]:
        """A stream's consumers live on its servers: when its servers change (peer
        removal, scaling), each consumer drops the servers that no longer hold the stream
        and takes the stream's new ones (those added first), up to its count: the stream's
        when it had followed it (no replica count of its own), else its own. Done in
        apply, so that no meta leader failing between two proposals can leave a consumer
        on a server without its stream."""
        if old.peers == new.peers:
            return []
        added = [p for p in new.peers if p not in old.peers]
        changes: list[Change] = []
        for ca in self.stream_consumers(new.account, new.name):
            follows = not ca.config.num_replicas and len(ca.peers) == len(old.peers)
            want = len(new.peers) if follows else min(len(ca.peers), len(new.peers))
            peers = _fit(ca.peers, new.peers, added, want)
            if peers == ca.peers:
                continue
            moved = msgspec.structs.replace(ca, peers=peers)
            if index:
                moved = msgspec.structs.replace(moved, placed=_placed(ca, peers, index))
            ckey = (ca.account, ca.stream, ca.name)
            self.consumers[ckey] = moved
            changes.append(ConsumerChanged(ckey, ca, moved))
        return changes

    def stream_consumers(self, account: str, stream: str) -> list[ConsumerAssignment]:
        return [ca for k, ca in self.consumers.items() if k[:2] == (account, stream)]

    def assets_of(self, server: str) -> tuple[int, int]:
        """(all, replicated) assets ``server`` holds: placement's measure of load."""
        total = ha = 0
        for sa in self.streams.values():
            if server in sa.peers:
                total += 1
                ha += len(sa.peers) > 1
        for ca in self.consumers.values():
            if server in ca.peers:
                total += 1
                ha += len(ca.peers) > 1
        return total, ha

    def snapshot(self) -> bytes:
        snap = _Snapshot(list(self.streams.values()), list(self.consumers.values()))
        return _encoder.encode(snap)

    def restore(self, blob: bytes) -> list[Change]:
        """Replace the state by a snapshot's; returns the changes against the old state,
        in the order ``apply`` gives them: a stream placed on (or moved to) a server
        before its consumers, which need the stream's replica there; consumers removed
        before their stream. Listing consumers first made a server that restored a
        snapshot placing a stream and its consumer on it skip the consumer for good, the
        stream's replica not being there yet (cluster simulator seed 403 of 5 servers)."""
        snap = _snapshot_decoder.decode(blob) if blob else _Snapshot([], [])
        old_streams, old_consumers = self.streams, self.consumers
        self.streams = {(sa.account, sa.name): sa for sa in snap.streams}
        self.consumers = {(ca.account, ca.stream, ca.name): ca for ca in snap.consumers}
        streams: list[Change] = []
        gone: list[Change] = []
        for sk in [*old_streams, *(k for k in self.streams if k not in old_streams)]:
            before, after = old_streams.get(sk), self.streams.get(sk)
            if before != after:
                (streams if after is not None else gone).append(
                    StreamChanged(sk, before, after))
        consumers: list[Change] = [
            ConsumerChanged(ck, old_consumers.get(ck), self.consumers.get(ck))
            for ck in [*old_consumers, *(k for k in self.consumers if k not in old_consumers)]
            if old_consumers.get(ck) != self.consumers.get(ck)
        ]
        return [*streams, *consumers, *gone]
