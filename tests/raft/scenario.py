"""Scenario transcripts: a tiny command language over tests.raft.harness.Cluster.

A transcript is a sequence of blocks separated by blank lines. Each block is one or more
command lines, then `----`, then the trace those commands produce; lines starting with
`#` before a block are comments. `python -m tests.raft.run --rewrite` (or
`pytest tests/raft --rewrite`) regenerates the expected traces.

Commands (node ids are words; `leader` names the current leader):
  nodes a b c [election=10 heartbeat=1 prevote=on checkquorum=on max_msg_bytes=N
               max_inflight=N seed=N]
  tick a [b ...] [n]      tick these nodes n times (processing Readys after each)
  tick-all [n]            tick every live node n times
  run [n]                 n rounds of tick-all + deliver until quiet (traces no messages)
  campaign a              start an election on a now (pre-vote first if enabled)
  elect a                 expire everyone's lease, campaign, deliver until quiet
  expire-lease [a ...]    as if an election period passed without a leader's news
  deliver [n]             deliver queued messages in order (all, or the first n)
  deliver-to a [n]        deliver only messages addressed to a
  stabilize               deliver until no message is left
  drop [a]                discard queued messages (all, or those from or to a)
  hold a c [n]            delay queued messages from a to c (all, or the first n)
  release [a c]           delayed messages (all, or a->c) arrive after everything queued
  partition a b | c       cut every link between the groups; heal removes all cuts
  heal
  propose a x             propose data x on node a
  transfer a [b]          a hands leadership to b (or to the most up-to-date voter)
  add-node d              create a fresh node that knows no group
  add-learner a d / promote a d / remove a d    membership change proposed on a
  crash a / restart a [corrupt]
  snapshot a [compact_to] a's state machine snapshots at its applied index
  status [a ...]          role, term, leader, commit, applied, log range per node
  log a                   a's log entries
  applied [a ...]         data each node's state machine applied
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jetraft.raft.membership import ChangeKind, MembershipChange
from jetraft.raft.ready import RaftConfig, RaftError
from tests.raft.harness import Cluster, entry_str


@dataclass
class Block:
    comments: list[str]
    commands: list[str]
    expected: list[str]


def parse(text: str) -> tuple[list[Block], list[str]]:
    """Blocks, and trailing comment lines after the last block."""
    blocks: list[Block] = []
    comments: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        i += 1
        if not line:
            continue
        if line.startswith("#"):
            comments.append(line)
            continue
        commands = [line]
        while i < len(lines) and lines[i].rstrip() != "----":
            if not lines[i].strip():
                raise ValueError(f"line {i + 1}: command block without ----")
            commands.append(lines[i].rstrip())
            i += 1
        i += 1  # the ----
        expected: list[str] = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i].rstrip())
            i += 1
        blocks.append(Block(comments, commands, expected))
        comments = []
    return blocks, comments


def render(blocks: list[Block], trailing: list[str], outputs: list[list[str]]) -> str:
    parts: list[str] = []
    for b, out in zip(blocks, outputs, strict=True):
        parts.append("\n".join([*b.comments, *b.commands, "----", *(out or ["ok"])]))
    text = "\n\n".join(parts) + "\n"
    if trailing:
        text += "\n" + "\n".join(trailing) + "\n"
    return text


class Runner:
    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.out: list[str] = []

    @property
    def c(self) -> Cluster:
        if self.cluster is None:
            raise ValueError("no cluster: start with `nodes ...`")
        return self.cluster

    def run_block(self, commands: list[str]) -> list[str]:
        self.out = []
        for cmd in commands:
            try:
                self.run(cmd)
            except (ValueError, IndexError, KeyError) as exc:
                self.out.append(f"error: {exc}")
        return self.out

    def node(self, word: str) -> str:
        if word == "leader":
            lead = self.c.leader()
            if lead is None:
                raise ValueError("no leader")
            return lead
        if word not in self.c.nodes:
            raise ValueError(f"unknown node {word}")
        return word

    def run(self, line: str) -> None:
        words = line.split()
        cmd, args = words[0], words[1:]
        handler = getattr(self, "cmd_" + cmd.replace("-", "_"), None)
        if handler is None:
            raise ValueError(f"unknown command {cmd!r}")
        handler(args)

    # ------------------------------------------------------------------ commands
    def cmd_nodes(self, args: list[str]) -> None:
        ids = [a for a in args if "=" not in a]
        opts = dict(a.split("=", 1) for a in args if "=" in a)
        on = {"on": True, "off": False}
        cfg = RaftConfig(
            election_ticks=int(opts.get("election", 10)),
            heartbeat_ticks=int(opts.get("heartbeat", 1)),
            pre_vote=on[opts.get("prevote", "on")],
            check_quorum=on[opts.get("checkquorum", "on")],
            max_msg_bytes=int(opts.get("max_msg_bytes", 1 << 20)),
            max_inflight=int(opts.get("max_inflight", 64)),
        )
        self.cluster = Cluster(ids, cfg, seed=int(opts.get("seed", 0)), trace=self.out_line)

    def out_line(self, line: str) -> None:
        self.out.append(line)

    def cmd_tick(self, args: list[str]) -> None:
        n = int(args.pop()) if args and args[-1].isdigit() else 1
        nids = [self.node(a) for a in args]
        for _ in range(n):
            for nid in nids:
                self.c.tick(nid)

    def cmd_run(self, args: list[str]) -> None:
        """n rounds of: tick every live node, deliver until quiet. Only role changes and
        applied entries are traced, not the messages."""
        out = self.out
        self.out = []
        try:
            for _ in range(int(args[0]) if args else 1):
                self.c.tick_all()
                self.c.stabilize()
        finally:
            out.extend(line for line in self.out if not line.startswith("  "))
            self.out = out

    def cmd_tick_all(self, args: list[str]) -> None:
        self.c.tick_all(int(args[0]) if args else 1)

    def cmd_campaign(self, args: list[str]) -> None:
        nid = self.node(args[0])
        self.c.nodes[nid].core.campaign()
        self.c.process(nid)

    def cmd_elect(self, args: list[str]) -> None:
        self.c.elect(self.node(args[0]))

    def cmd_expire_lease(self, args: list[str]) -> None:
        self.c.expire_lease(*[self.node(a) for a in args])

    def cmd_deliver(self, args: list[str]) -> None:
        self.c.deliver(int(args[0]) if args else None)

    def cmd_deliver_to(self, args: list[str]) -> None:
        self.c.deliver(int(args[1]) if len(args) > 1 else None, only=self.node(args[0]))

    def cmd_stabilize(self, args: list[str]) -> None:
        self.c.stabilize()

    def cmd_drop(self, args: list[str]) -> None:
        who = self.node(args[0]) if args else None
        keep = [m for m in self.c.queue if who is not None and who not in (m.frm, m.to)]
        self.out.append(f"dropped {len(self.c.queue) - len(keep)} messages")
        self.c.queue = keep

    def cmd_hold(self, args: list[str]) -> None:
        frm, to = self.node(args[0]), self.node(args[1])
        n = self.c.hold(frm, to, int(args[2]) if len(args) > 2 else None)
        self.out.append(f"held {n} messages {frm}->{to}")

    def cmd_release(self, args: list[str]) -> None:
        link = (self.node(args[0]), self.node(args[1])) if args else (None, None)
        self.out.append(f"released {self.c.release(*link)} messages")

    def cmd_partition(self, args: list[str]) -> None:
        groups: list[list[str]] = [[]]
        for a in args:
            if a == "|":
                groups.append([])
            else:
                groups[-1].append(self.node(a))
        self.c.partition(*groups)

    def cmd_heal(self, args: list[str]) -> None:
        self.c.heal()

    def _try(self, nid: str, what: str, fn: Callable[[], object]) -> None:
        try:
            result = fn()
        except (RaftError, ValueError) as exc:
            self.out.append(f"{nid}: {what} refused: {exc}")
            return
        self.out.append(f"{nid}: {what} -> {result}")
        self.c.process(nid)

    def cmd_propose(self, args: list[str]) -> None:
        nid = self.node(args[0])
        core = self.c.nodes[nid].core
        self._try(nid, f"propose {args[1]}", lambda: core.propose(args[1].encode()))

    def cmd_transfer(self, args: list[str]) -> None:
        nid = self.node(args[0])
        core = self.c.nodes[nid].core
        to = self.node(args[1]) if len(args) > 1 else None
        self._try(nid, "transfer", lambda: core.transfer_leadership(to))

    def _change(self, kind: ChangeKind, args: list[str]) -> None:
        nid = self.node(args[0])
        core = self.c.nodes[nid].core
        change = MembershipChange(kind, args[1])
        self._try(nid, f"{kind.value} {args[1]}", lambda: core.change_membership(change))

    def cmd_add_learner(self, args: list[str]) -> None:
        self._change(ChangeKind.ADD_LEARNER, args)

    def cmd_promote(self, args: list[str]) -> None:
        self._change(ChangeKind.PROMOTE, args)

    def cmd_remove(self, args: list[str]) -> None:
        self._change(ChangeKind.REMOVE, args)

    def cmd_add_node(self, args: list[str]) -> None:
        self.c.add_node(args[0])

    def cmd_crash(self, args: list[str]) -> None:
        self.c.crash(self.node(args[0]))

    def cmd_restart(self, args: list[str]) -> None:
        self.c.restart(self.node(args[0]), corrupt="corrupt" in args[1:])

    def cmd_snapshot(self, args: list[str]) -> None:
        nid = self.node(args[0])
        snap = self.c.snapshot(nid, int(args[1]) if len(args) > 1 else None)
        first = self.c.nodes[nid].core.log.first_index
        self.out.append(f"{nid}: snapshot at {snap.meta.index}/{snap.meta.term}, "
                        f"log starts at {first}")

    def cmd_status(self, args: list[str]) -> None:
        for nid in [self.node(a) for a in args] or self.c.ids:
            node = self.c.nodes[nid]
            if not node.up:
                self.out.append(f"{nid}: down")
                continue
            s = node.core.status()
            m = s.membership
            learners = f" learners={','.join(m.learners)}" if m.learners else ""
            corrupt = " corrupt" if s.corrupt else ""
            self.out.append(
                f"{nid}: {s.role.value} term={s.term} leader={s.leader or '-'} "
                f"commit={s.commit} applied={s.applied} log={s.first_index}..{s.last_index} "
                f"voters={','.join(m.voters)}{learners}{corrupt}"
            )

    def cmd_log(self, args: list[str]) -> None:
        log = self.c.nodes[self.node(args[0])].core.log
        ents = [entry_str(log.entry(i)) for i in range(log.first_index, log.last_index + 1)]
        self.out.append(f"{args[0]}: " + (" ".join(ents) or "(empty)"))

    def cmd_applied(self, args: list[str]) -> None:
        for nid in [self.node(a) for a in args] or self.c.ids:
            self.out.append(f"{nid}: " + (" ".join(self.c.nodes[nid].data()) or "(nothing)"))


def run_text(text: str) -> tuple[str, str]:
    """(expected as written, actual) for a transcript."""
    blocks, trailing = parse(text)
    runner = Runner()
    outputs = [runner.run_block(b.commands) for b in blocks]
    expected = render(blocks, trailing, [b.expected for b in blocks])
    return expected, render(blocks, trailing, outputs)
