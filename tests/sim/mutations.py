"""Deliberately broken variants of the core's safety rules, for the mutation test.

Each mutation replaces one rule through monkeypatching (the production code has no
flags for it) and names where it lives. The simulator must catch every one of them
within a bounded number of seeds: a simulator that cannot tell these from the real
rules proves nothing by passing. `python -m tests.sim.mutations [name]` prints how
many seeds each one takes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from jetraft.raft import driver, replication
from jetraft.raft.core import RaftCore
from jetraft.raft.log import RaftLog
from jetraft.raft.membership import quorum
from jetraft.raft.messages import InstallSnapshot, Message
from jetraft.raft.progress import Progress
from jetraft.raft.ready import Ready
from jetraft.raft.sim import SimConfig, run_seed
from jetraft.raft.types import SnapshotMeta


def commit_any_term(core: RaftCore) -> bool:
    """Commit rule without the term check: an old entry on a quorum counts as committed
    (Figure 8 of the Raft paper shows how that loses it)."""
    voters = core.membership.voters
    if not voters:
        return False
    matches = sorted((core.prs[v].match if v in core.prs else 0 for v in voters), reverse=True)
    mci = matches[quorum(len(voters)) - 1]
    if mci <= core.log.committed:
        return False
    core.log.commit_to(mci)
    return True


def vote_ignores_log(self: RaftLog, last_index: int, last_term: int) -> bool:
    """Vote rule without the election restriction: any log is up to date."""
    return True


def match_ignores_term(self: RaftLog, index: int, term: int) -> bool:
    """AppendEntries consistency check that only asks whether the follower has an entry
    at prev_index, not whether its term matches."""
    return self.term(index) is not None


def heartbeat_full_commit(core: RaftCore, pr: Progress) -> int:
    """Follower commit bound broken: heartbeats carry the leader's whole commit index,
    so a follower commits entries of its log that were never checked against the
    leader's (a stale, divergent suffix)."""
    return core.log.committed


def send_before_persist(
    rd: Ready, durable_term: int, durable_vote: str
) -> tuple[list[Message], list[Message]]:
    """Persist-before-send broken: every message leaves before the fsync."""
    return list(rd.messages), []


def install_with_leader_term(core: RaftCore, m: InstallSnapshot) -> None:
    """Snapshot installation that takes the leader's current term as the term of the
    snapshot's last entry (instead of the term that entry has): the follower's log then
    claims an entry it does not hold, for the log matching check and for elections."""
    meta = SnapshotMeta(m.meta.index, m.term, m.meta.membership)
    _real_handle_snapshot(core, replace(m, meta=meta))


_real_handle_snapshot = replication.handle_snapshot


@dataclass(frozen=True)
class Mutation:
    name: str
    rule: str
    patch: Callable[[pytest.MonkeyPatch], None]
    max_seeds: int  # the simulator must catch it within this many seeds (0, 1, ...)


def _set(target: object, attr: str, value: object) -> Callable[[pytest.MonkeyPatch], None]:
    return lambda mp: mp.setattr(target, attr, value)


def _persist(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(driver, "split_messages", send_before_persist)
    mp.setattr(driver.Driver, "check_durable", lambda self, m: None)  # its own guard too


MUTATIONS = [
    Mutation("commit_any_term", "commit rule (Figure 8)",
             _set(replication, "maybe_commit", commit_any_term), 200),
    Mutation("vote_ignores_log", "vote rule (election restriction)",
             _set(RaftLog, "is_up_to_date", vote_ignores_log), 30),
    Mutation("match_ignores_term", "AppendEntries consistency check",
             _set(RaftLog, "match_term", match_ignores_term), 30),
    Mutation("heartbeat_full_commit", "follower commit bound",
             _set(replication, "heartbeat_commit", heartbeat_full_commit), 60),
    Mutation("send_before_persist", "persist before send", _persist, 10),
    Mutation("install_with_leader_term", "snapshot installation",
             _set(replication, "handle_snapshot", install_with_leader_term), 60),
]


def first_catch(mutation: Mutation, cfg: SimConfig) -> tuple[int, str] | None:
    """The first seed (from 0) on which the simulator reports a violation, with it."""
    mp = pytest.MonkeyPatch()
    try:
        mutation.patch(mp)
        for seed in range(mutation.max_seeds):
            try:
                res = run_seed(seed, cfg)
            except Exception as exc:  # the broken rule crashed the core: caught too
                return seed, f"{type(exc).__name__}: {exc}"
            if not res.ok:
                return seed, res.error
        return None
    finally:
        mp.undo()


def main(argv: list[str]) -> int:
    chosen = [m for m in MUTATIONS if not argv or m.name in argv]
    for m in chosen:
        t0 = time.monotonic()
        found = first_catch(m, SimConfig())
        took = f"{time.monotonic() - t0:.1f}s"
        if found is None:
            print(f"{m.name:24} MISSED within {m.max_seeds} seeds ({took})")
        else:
            print(f"{m.name:24} caught at seed {found[0]:4} ({took}): {found[1][:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
