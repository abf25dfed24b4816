"""How a clustered JetStream replica's RAFT group starts from what its directory holds
(``server.js.clustered.group.RaftGroup.start``): lost logs, empty directories, and the
recorded way the replica started. Each case is one the cluster simulator found the
server getting wrong (``jetraft.sim.cluster.fixes``)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jetraft.raft.disk import OsDisk
from jetraft.raft.node import Ticker
from jetraft.raft.types import Entry
from jetraft.raft.wal import Wal
from jetraft.server.cluster.raftnet import RaftNet
from jetraft.server.js.clustered.group import TICK_S, RaftGroup

GROUP = "S-R3F-abc"


class _Sender:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def send_raft(self, to_server: str, group: str, data: bytes) -> None:
        self.sent.append((to_server, group))

    def push_raft(self) -> None:
        pass


class _Host:
    """A server of a cluster whose peers never answer (GroupHost)."""

    def __init__(self, root: Path, name: str = "a") -> None:
        self.root = root
        self.server_name = name
        self.cluster_name = "C1"
        self.sender = _Sender()
        self.raftnet = RaftNet(self.sender)
        self.ticker = Ticker(TICK_S)

    def raft_dir(self, group: str) -> Path:
        return self.root / "_raft_" / group

    def is_online(self, server: str) -> bool:
        return True


class _Machine:
    def apply(self, entry: Entry) -> object:
        return None

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[_Host]:
    yield _Host(tmp_path)


async def _started(host: _Host, peers: tuple[str, ...], *, known: bool) -> RaftGroup:
    group = RaftGroup(host, GROUP, _Machine(), peers)
    await group.start(known=known)
    return group


async def test_a_known_group_whose_directory_is_gone_rejoins_as_damaged(host: _Host) -> None:
    group = await _started(host, ("a", "b", "c"), known=True)
    try:
        assert group.corrupt == "log lost"
        assert group.node is not None and group.node.core.corrupt
    finally:
        await group.stop()


async def test_a_replica_stopped_before_its_first_fsync_is_not_damaged(host: _Host) -> None:
    # The replica was made (how it started is recorded first), but the server stopped
    # before anything of its log was durable: it acknowledged nothing and voted for
    # nobody, so it may vote as a fresh replica (a damaged one votes for nobody until
    # repaired: a group whose other voter is down could never elect a leader).
    wal, _ = Wal.open(OsDisk(), str(host.raft_dir(GROUP)))
    wal.set_bootstrap(("a", "b"))
    wal.close()
    group = await _started(host, ("a", "b"), known=True)
    try:
        assert group.corrupt == ""
        assert group.node is not None and not group.node.core.corrupt
        assert group.node.core.membership.voters == ("a", "b")
    finally:
        await group.stop()


async def test_a_known_group_whose_files_are_gone_rejoins_as_damaged(host: _Host) -> None:
    group = await _started(host, ("a", "b", "c"), known=False)
    await group.stop()
    for f in host.raft_dir(GROUP).iterdir():
        f.unlink()
    again = await _started(host, ("a", "b", "c"), known=True)
    try:
        assert again.corrupt == "log lost"
        assert again.node is not None and again.node.core.corrupt
    finally:
        await again.stop()


async def test_a_lost_log_stays_lost_across_restarts(host: _Host) -> None:
    group = await _started(host, ("a", "b", "c"), known=True)
    node = group.node
    assert node is not None
    await node.wait_for(lambda: node.fsyncs > 0, 5.0)  # its new term persisted
    await group.stop()
    wal, rec = Wal.open(OsDisk(), str(host.raft_dir(GROUP)))
    wal.close()
    assert rec.hard_state.term > 0  # the log is no longer empty; still not repaired
    again = await _started(host, ("a", "b", "c"), known=True)
    try:
        assert again.corrupt == "log lost"
        assert again.node is not None and again.node.core.corrupt
    finally:
        await again.stop()


async def test_a_restart_starts_the_replica_as_it_first_started(host: _Host) -> None:
    # Started as one of a new group's first voters; the group moved on (the assignment
    # replayed at the next start names other servers): the replica restarts with the
    # voters it started with, its configuration changes come from its log.
    group = await _started(host, ("a", "b", "c"), known=False)
    await group.stop()
    wal, rec = Wal.open(OsDisk(), str(host.raft_dir(GROUP)))
    wal.close()
    assert rec.bootstrap == ("a", "b", "c")
    again = await _started(host, ("a", "d", "e"), known=True)
    try:
        assert again.node is not None
        assert again.node.core.membership.voters == ("a", "b", "c")
        assert again.corrupt == ""
    finally:
        await again.stop()


async def test_a_replica_that_joined_restarts_as_joining(host: _Host) -> None:
    # It joined an existing group (no peers: its leader adds it); replayed later under
    # an assignment naming it, it must not start as a voter of a group of its own.
    group = await _started(host, (), known=False)
    await group.stop()
    again = await _started(host, ("a", "b"), known=True)
    try:
        assert again.node is not None
        assert again.node.core.membership.voters == ()
    finally:
        await again.stop()


async def test_a_lost_log_takes_its_configuration_from_the_leader(host: _Host) -> None:
    group = await _started(host, ("a", "b"), known=False)
    await group.stop()
    shutil.rmtree(host.raft_dir(GROUP))
    again = await _started(host, ("a", "b"), known=True)
    try:
        assert again.corrupt == "log lost"
        assert again.node is not None
        assert again.node.core.membership.voters == ()
    finally:
        await again.stop()
    # Its next term is durable now: a restart still takes its configuration from its
    # leader, and still knows it is damaged.
    third = await _started(host, ("a", "b"), known=True)
    try:
        assert third.corrupt == "log lost"
        assert third.node is not None
        assert third.node.core.membership.voters == ()
    finally:
        await third.stop()


async def test_destroying_a_replica_syncs_the_removal(
    host: _Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a replica removed leaves on disk must stay removed after a power loss: the
    # unlinked files and the directory's removal are synced (a file that came back would
    # restart the replica on an older log).
    group = await _started(host, ("a", "b", "c"), known=False)
    gdir = host.raft_dir(GROUP)
    synced: list[tuple[str, list[str], bool]] = []

    def sync_dir(self: OsDisk, dirname: str) -> None:
        path = Path(dirname)
        synced.append((dirname, sorted(p.name for p in path.iterdir()), gdir.exists()))

    monkeypatch.setattr(OsDisk, "sync_dir", sync_dir)
    await group.destroy()
    assert not gdir.exists()
    assert (str(gdir), [], True) in synced  # the unlinks, before the directory goes
    assert synced[-1] == (str(gdir.parent), [], False)  # then the directory's removal
