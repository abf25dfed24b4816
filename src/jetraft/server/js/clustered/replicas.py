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
import time
from pathlib import Path
from typing import TYPE_CHECKING

from jetraft.jetstream.meta import Change, ConsumerChanged, StreamChanged
from jetraft.raft.disk import OsDisk
from jetraft.raft.ready import RaftError
from jetraft.server.js.clustered.consumer_replica import ConsumerReplica
from jetraft.server.js.clustered.group import remove_durably
from jetraft.server.js.clustered.stream_replica import StreamReplica

if TYPE_CHECKING:
    from jetraft.server.js.clustered.jetstream import ClusteredJetStream

log = logging.getLogger("jetraft.js.cluster")

# A replica taken out of its group stops once the group no longer counts it, or after this.
LEAVE_TIMEOUT_S = 30.0
META_APPLIED_FILE = "meta_applied"


class ReplicaKeeper:
    def __init__(self, js: ClusteredJetStream) -> None:
        self.js = js
        self.changes: asyncio.Queue[tuple[Change, bool]] = asyncio.Queue()
        self.done_at_start = 0  # the meta index carried out before this start
        self.recorded = 0

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
        replay = index is None or index <= self.done_at_start
        for change in changes:
            self.changes.put_nowait((change, replay))

    async def process_changes(self) -> None:
        while True:
            change, replay = await self.changes.get()
            try:
                if isinstance(change, StreamChanged):
                    await self._stream_changed(change, replay)
                elif isinstance(change, ConsumerChanged):
                    await self._consumer_changed(change, replay)
            except Exception:
                log.exception("JetStream cluster: applying %s failed", change)
            if self.changes.empty():
                try:
                    await self._record()
                except OSError as exc:
                    log.error("JetStream cluster: recording the meta index carried out "
                              "failed: %s", exc)

    async def _record(self) -> None:
        """Every change the meta group applied up to its applied index is carried out
        (the meta group queues an entry's changes as it applies it): say so durably."""
        index = self.js.meta.applied_index
        if index <= self.recorded:
            return
        path = str(self.record_path)
        await asyncio.to_thread(OsDisk().write_atomic, path, str(index).encode())
        self.recorded = index

    async def _stream_changed(self, change: StreamChanged, replay: bool) -> None:
        js = self.js
        me = js.server_name
        key, new = change.key, change.new
        replica = js.streams.get(key)
        if new is not None and me not in new.peers and replica is not None:
            # Taken out of the group: keep serving the group until its leader has removed
            # us from the RAFT membership (it may need our vote to commit that change).
            del js.streams[key]
            js.leaving[key] = replica
            replica.assignment_changed(new)
            js.spawn(self._leave(replica))
            return
        if replica is None and new is not None and me in new.peers and key in js.leaving:
            back = js.leaving.pop(key)  # back in before it left
            assert isinstance(back, StreamReplica)
            replica = js.streams[key] = back
        if new is None or me not in new.peers:
            if replica is not None:
                del js.streams[key]
                log.info("stream %s > %s: deleted", *key)
                await replica.destroy()
            elif new is None:
                await asyncio.to_thread(_remove_dir, js.raft_dir(change.old.group)
                                        if change.old is not None else None)
            return
        if replica is not None:
            replica.assignment_changed(new)
            js.serve_direct(replica)
            return
        if js.account_named(new.account) is None:
            log.error("stream %s > %s: account unknown here", *key)
            return
        joining = change.old is not None and me not in change.old.peers
        replica = StreamReplica(js, new, joining=joining)
        js.streams[key] = replica
        await replica.start(known=replay)
        js.serve_direct(replica)

    async def _consumer_changed(self, change: ConsumerChanged, replay: bool) -> None:
        js = self.js
        me = js.server_name
        key, new = change.key, change.new
        replica = js.consumers.get(key)
        if new is not None and me not in new.peers and replica is not None:
            del js.consumers[key]
            js.leaving[key] = replica
            replica.assignment_changed(new)
            js.spawn(self._leave(replica))
            return
        if replica is None and new is not None and me in new.peers and key in js.leaving:
            back = js.leaving.pop(key)
            assert isinstance(back, ConsumerReplica)
            replica = js.consumers[key] = back
        if new is None or me not in new.peers:
            if replica is not None:
                del js.consumers[key]
                await replica.destroy()
                stream = js.streams.get(key[:2])
                if new is None and stream is not None and stream.is_leader:
                    stream.recheck_retention()  # what only this consumer held may go
            elif change.old is not None and new is None:
                await asyncio.to_thread(_remove_dir, js.raft_dir(change.old.group))
            return
        if replica is not None:
            replica.assignment_changed(new)
            return
        stream = js.streams.get(key[:2])
        account = js.account_named(new.account)
        if stream is None or account is None:
            log.error("consumer %s > %s > %s: its stream has no replica here", *key)
            return
        joining = change.old is not None and me not in change.old.peers
        replica = ConsumerReplica(js, new, stream, account, joining=joining)
        js.consumers[key] = replica
        await replica.start(known=replay)

    async def _leave(self, replica: StreamReplica | ConsumerReplica) -> None:
        js = self.js
        log.info("%s: this server is no longer a replica", " > ".join(replica.key))
        if isinstance(replica, StreamReplica):
            replica.serve_direct(None)
        deadline = time.monotonic() + LEAVE_TIMEOUT_S
        while time.monotonic() < deadline and not replica.closed:
            if js.leaving.get(replica.key) is not replica:
                return  # assigned here again meanwhile
            if replica.is_leader:
                with contextlib.suppress(RaftError):
                    replica.step_down()
            elif replica.group.removed or js.server_name not in replica.group.members():
                break
            await asyncio.sleep(0.2)
        if js.leaving.get(replica.key) is replica:
            del js.leaving[replica.key]
            await replica.destroy()


def _remove_dir(path: Path | None) -> None:
    if path is not None:
        remove_durably(path)
