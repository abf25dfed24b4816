"""This server's stream and consumer replicas, made, reshaped and destroyed as the meta
group's applied changes say (``ReplicaKeeper``).

The meta group's state machine queues every change it applies; one task carries them out
in order:

* a stream or consumer assigned here gets a replica (a server joining an existing group
  starts it without peers: the group's leader adds it);
* one whose assignment changed is told (its leader reconciles the group with it);
* one taken out of its group keeps serving (``leaving``) until its group lets it go, then
  is destroyed with its log; one deleted is destroyed at once.

Restarts: the meta group replays its log, and the changes of entries carried out before
the restart must start replicas as "known" (a known group whose log is gone lost it: see
``RaftGroup.start``), while entries applied but never carried out (committed just before
the process stopped) are new. So the keeper records durably the meta index up to which it
has carried out every change (``meta_applied``), and on restart counts exactly the
entries up to there as replays. Neither the log's last index nor its commit index will
do: the first counts entries never carried out as replays (a new stream's only replica
then starts as one that lost its log, never led), the second lags, and an old
assignment applied again as new makes a destroyed replica fresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jetraft.jetstream.meta import (
    Change,
    ConsumerAssignment,
    ConsumerChanged,
    StreamAssignment,
    StreamChanged,
    carried_out,
    joins_group,
    superseded,
)
from jetraft.raft.disk import OsDisk
from jetraft.raft.ready import RaftError
from jetraft.server.js.clustered.consumer_replica import ConsumerReplica
from jetraft.server.js.clustered.group import remove_durably
from jetraft.server.js.clustered.stream_file import FileStreamReplica
from jetraft.server.js.clustered.stream_replica import StreamReplica

if TYPE_CHECKING:
    from jetraft.server.js.clustered.jetstream import ClusteredJetStream

log = logging.getLogger("jetraft.js.cluster")

Replica = StreamReplica | ConsumerReplica

LEAVE_CHECK_S = 0.2  # how often a leaving replica looks whether its group let it go
CHECK_EVERY_S = 0.5  # an idle keeper looks for replicas let go while assigned here
RECHECK_EVERY_S = 1.0  # how often leaders check that their group is as assigned
META_APPLIED_FILE = "meta_applied"


class ReplicaKeeper:
    def __init__(self, js: ClusteredJetStream) -> None:
        self.js = js
        self.changes: asyncio.Queue[tuple[Change, bool]] = asyncio.Queue()
        self.done_at_start = 0  # the meta index carried out before this start
        self.recorded = 0
        self.destroying: set[str] = set()  # groups whose leaving replica is being destroyed

    @property
    def record_path(self) -> Path:
        return self.js.root / META_APPLIED_FILE

    def load(self) -> None:
        """Read the record (before the meta group replays its log)."""
        try:
            self.done_at_start = int(self.record_path.read_text())
        except FileNotFoundError:
            self.done_at_start = 0
        self.recorded = self.done_at_start

    def meta_changed(self, changes: list[Change], index: int | None) -> None:
        """The meta group applied ``changes`` (``index`` None: from a snapshot)."""
        for change in changes:
            self.changes.put_nowait(
                (change, carried_out(change, index, self.done_at_start, self.js.server_name)))


    async def process_changes(self) -> None:
        while True:
            try:
                change, replay = await asyncio.wait_for(self.changes.get(), CHECK_EVERY_S)
            except TimeoutError:
                await self._guarded(self._check_removed(), "checking removed replicas")
                continue
            if isinstance(change, StreamChanged):
                await self._guarded(self._stream_changed(change, replay), f"applying {change}")
            else:
                await self._guarded(self._consumer_changed(change, replay),
                                    f"applying {change}")
            if self.changes.empty():
                # The meta state moved: a leftover may show only now (see _adopt_leftovers).
                await self._guarded(self._adopt_leftovers(), "adopting leftover replicas")
                try:
                    await self._record()
                except OSError as exc:
                    log.error("JetStream cluster: recording the meta index carried out "
                              "failed: %s", exc)

    async def recheck_leaders(self) -> None:
        """Every second, each group this server leads is brought in line with its
        assignment again if it still differs (``StreamReplica.recheck``)."""
        js = self.js
        while True:
            await asyncio.sleep(RECHECK_EVERY_S)
            for replica in [*js.streams.values(), *js.consumers.values(),
                            *js.leaving.values()]:
                try:
                    replica.recheck()
                except Exception:
                    log.exception("%s: reconcile check failed", " > ".join(replica.key))

    async def _guarded(self, work: Coroutine[Any, Any, Any], what: str) -> None:
        try:
            await work
        except Exception:
            log.exception("JetStream cluster: %s failed", what)

    async def _record(self) -> None:
        """Every change the meta group applied up to its applied index is carried out
        (the meta group queues an entry's changes as it applies it): say so durably."""
        index = self.js.meta.applied_index
        if index <= self.recorded:
            return
        path = str(self.record_path)
        await asyncio.to_thread(OsDisk().write_atomic, path, str(index).encode())
        self.recorded = index

    # --- streams -----------------------------------------------------------------------------

    async def _stream_changed(self, change: StreamChanged, replay: bool) -> None:
        js = self.js
        me = js.server_name
        key, new = change.key, change.new
        replica = js.streams.get(key)
        if new is not None and me not in new.peers and replica is not None:
            # Taken out of the group: keep serving the group until its leader has removed
            # us from the RAFT membership (it may need our vote to commit that change).
            del js.streams[key]
            self._start_leaving(replica)
            replica.assignment_changed(new)
            return
        if replica is None and new is not None and me in new.peers and key in js.leaving:
            back = await self._take_back(key)
            if back is not None:
                assert isinstance(back, StreamReplica)
                replica = js.streams[key] = back
        if new is None or me not in new.peers:
            if replica is not None:
                del js.streams[key]
                log.info("stream %s > %s: deleted", *key)
                await replica.destroy()
            elif new is None:
                await self._deleted(key, change.old.group if change.old is not None else None)
            else:
                leaving = js.leaving.get(key)
                if isinstance(leaving, StreamReplica):
                    leaving.assignment_changed(new)  # still leaving: towards the newest
            return
        if replica is not None:
            replica.assignment_changed(new)
            js.serve_direct(replica)
            return
        if replay and superseded(js.meta.state.streams.get(key), new):
            return
        await self._make_stream(new, joining=joins_group(change, me), known=replay)

    async def _make_stream(self, sa: StreamAssignment, *, joining: bool,
                           known: bool) -> StreamReplica | None:
        js = self.js
        if js.account_named(sa.account) is None:
            log.error("stream %s > %s: account unknown here", sa.account, sa.name)
            return None
        replica: StreamReplica
        if sa.first_config.storage == "file":
            # Its store is recovered in a worker thread (it reads every block), not on
            # the loop; the replica and its group exist only once it is open.
            replica = await FileStreamReplica.open(js, sa, joining=joining)
        else:
            replica = StreamReplica(js, sa, joining=joining)
        js.streams[replica.key] = replica
        await replica.start(known=known)
        js.serve_direct(replica)
        for consumer in [*js.consumers.values(), *js.leaving.values()]:
            if isinstance(consumer, ConsumerReplica) and consumer.key[:2] == replica.key:
                consumer.follow_stream()  # it came back: its consumers read this one now
        return replica

    # --- consumers ---------------------------------------------------------------------------

    async def _consumer_changed(self, change: ConsumerChanged, replay: bool) -> None:
        js = self.js
        me = js.server_name
        key, new = change.key, change.new
        replica = js.consumers.get(key)
        if new is not None and me not in new.peers and replica is not None:
            del js.consumers[key]
            self._start_leaving(replica)
            replica.assignment_changed(new)
            return
        if replica is None and new is not None and me in new.peers and key in js.leaving:
            back = await self._take_back(key)
            if back is not None:
                assert isinstance(back, ConsumerReplica)
                replica = js.consumers[key] = back
        if new is None or me not in new.peers:
            if replica is not None:
                del js.consumers[key]
                await replica.destroy()
                stream = js.streams.get(key[:2])
                if new is None and stream is not None and stream.is_leader:
                    stream.recheck_retention()  # what only this consumer held may go
            elif new is None:
                await self._deleted(key, change.old.group if change.old is not None else None)
            else:
                leaving = js.leaving.get(key)
                if isinstance(leaving, ConsumerReplica):
                    leaving.assignment_changed(new)  # still leaving: towards the newest
            return
        if replica is not None:
            replica.assignment_changed(new)
            return
        if replay and superseded(js.meta.state.consumers.get(key), new):
            return
        await self._make_consumer(new, joining=joins_group(change, me), known=replay)

    async def _make_consumer(self, ca: ConsumerAssignment, *, joining: bool,
                             known: bool) -> ConsumerReplica | None:
        js = self.js
        key = (ca.account, ca.stream, ca.name)
        stream = js.streams.get(key[:2]) or js.leaving.get(key[:2])
        account = js.account_named(ca.account)
        if not isinstance(stream, StreamReplica) or account is None:
            log.error("consumer %s > %s > %s: its stream has no replica here", *key)
            return None
        replica = ConsumerReplica(js, ca, stream, account, joining=joining)
        js.consumers[key] = replica
        await replica.start(known=known)
        return replica

    # --- leaving -----------------------------------------------------------------------------

    def _start_leaving(self, replica: Replica) -> None:
        self.js.leaving[replica.key] = replica
        self.js.spawn(self._leave(replica))

    async def _take_back(self, key: tuple[str, ...]) -> Replica | None:
        """Assigned here again before the replica left. One its group already let go
        (stopped for good as removed) would never run again, and the group's leader would
        wait for it as a learner forever: it is destroyed, and a fresh one joins (None)."""
        replica = self.js.leaving.pop(key)
        if replica.group.removed or replica.group.node is None:
            await replica.destroy()
            return None
        return replica

    async def _leave(self, replica: Replica) -> None:
        """A replica taken out of its group serves until its group lets it go: until a
        committed configuration without it took effect (its node stopped as removed).
        Neither a timeout nor a newest configuration without it that is not committed
        will do: a voter destroyed before the group stopped counting it, or whose removal
        is then lost, can cost the group its quorum for good. As leader it hands over to
        a voter of its current assignment (none yet: the reconcile task adds one and
        hands over itself), never to another replica on its way out, which would hand
        leadership back and reshape the group towards an older assignment."""
        js = self.js
        log.info("%s: this server is no longer a replica", " > ".join(replica.key))
        if isinstance(replica, StreamReplica):
            replica.serve_direct(None)
        while not replica.closed:
            if js.leaving.get(replica.key) is not replica:
                return  # assigned here again meanwhile
            if replica.group.removed or _never_joined(replica):
                break
            if replica.group.is_leader:
                successor = _successor(replica)
                if successor:
                    with contextlib.suppress(RaftError, ValueError):
                        replica.step_down(successor)
            await asyncio.sleep(LEAVE_CHECK_S)
        if js.leaving.get(replica.key) is replica:
            del js.leaving[replica.key]
            self.destroying.add(replica.group.group)  # not a leftover meanwhile
            try:
                await replica.destroy()
            finally:
                self.destroying.discard(replica.group.group)

    async def _deleted(self, key: tuple[str, ...], group: str | None) -> None:
        """The stream or consumer is gone: a replica still leaving it goes too (there is
        no group left to protect), and whatever log of it is left here."""
        leaving = self.js.leaving.pop(key, None)
        if leaving is not None:
            await leaving.destroy()
        await asyncio.to_thread(_remove_dir, self.js.raft_dir(group) if group else None)

    async def _check_removed(self) -> None:
        """A replica its group let go while this server is assigned to it again (the
        assignment came back before the removal was applied) never runs again: it is
        destroyed, and a fresh replica joins."""
        js = self.js
        for key, stream in list(js.streams.items()):
            if stream.group.removed and js.streams.get(key) is stream:
                del js.streams[key]
                await stream.destroy()
                await self._make_stream(stream.sa, joining=True, known=False)
        for ckey, consumer in list(js.consumers.items()):
            if not consumer.group.removed or js.consumers.get(ckey) is not consumer:
                continue
            if ckey[:2] in js.streams:
                del js.consumers[ckey]
                await consumer.destroy()
                await self._make_consumer(consumer.ca, joining=True, known=False)

    async def _adopt_leftovers(self) -> None:
        """A group's log on disk whose assignment no longer names this server, and that no
        replica here runs: the replica was on its way out when the process stopped. It is
        started again as leaving, to serve until its group lets it go (its group may
        still count it as a voter: without it, it may never have a quorum again)."""
        js = self.js
        root = js.raft_dir("_")
        names = await asyncio.to_thread(_group_dirs, root.parent)
        if not names:
            return
        running = {r.group.group for r in [*js.streams.values(), *js.consumers.values(),
                                            *js.leaving.values()]} | self.destroying
        state = js.meta.state
        streams = {sa.group: sa for sa in state.streams.values()}
        consumers = {ca.group: ca for ca in state.consumers.values()}
        me = js.server_name
        for name in names:  # streams first: a consumer replica needs its stream's
            sa = streams.get(name)
            if sa is None or name in running or me in sa.peers:
                continue
            replica = await self._make_stream(sa, joining=True, known=True)
            if replica is not None:
                del js.streams[replica.key]
                self._start_leaving(replica)
        for name in names:
            ca = consumers.get(name)
            if ca is None or name in running or me in ca.peers:
                continue
            consumer = await self._make_consumer(ca, joining=True, known=True)
            if consumer is not None:
                del js.consumers[consumer.key]
                self._start_leaving(consumer)


def _successor(replica: Replica) -> str:
    """A voter of the replica's current assignment to hand leadership to ("": none)."""
    node = replica.group.node
    if node is None:
        return ""
    peers = replica.sa.peers if isinstance(replica, StreamReplica) else replica.ca.peers
    voters = node.core.membership.voters
    return next((p for p in sorted(peers) if p in voters), "")


def _never_joined(replica: Replica) -> bool:
    """A replica that joined and was never given its group's configuration (the leader
    had not added it yet): it never counted for anything, so it may go at once (its
    removal, never to come, is not awaited). Not a damaged one: it may have been a
    voter, and its leader repairs it (the configuration comes with the repair) before
    removing it."""
    node = replica.group.node
    if node is None or node.core.corrupt:
        return False
    m = node.core.membership
    return not m.voters and not m.learners and not node.core.in_bootstrap


def _group_dirs(root: Path) -> list[str]:
    try:
        return sorted(p.name for p in root.iterdir() if p.is_dir())
    except FileNotFoundError:
        return []


def _remove_dir(path: Path | None) -> None:
    if path is not None:
        remove_durably(path)

