"""A seeded fault schedule against a working cluster: while clients publish (retrying with
Nats-Msg-Id) and consume with confirmed acks, one server at a time is killed, frozen,
partitioned away or made to step down. Afterwards every acknowledged message is stored
exactly once, every replica holds the same messages, and every confirmed ack holds.

Each fault lasts until the others have acknowledged more messages (the cluster made
progress without that server), and the next comes once the cluster made progress after
healing, so the schedule waits on conditions, not on time. CI runs a short schedule;
``JETRAFT_CHAOS_FAULTS=60 JETRAFT_CHAOS_NODES=5 pytest -m slow tests/cluster/test_chaos.py``
runs a long one (``JETRAFT_CHAOS_SEED`` replays a schedule; the seed is printed on failure;
``JETRAFT_CHAOS_BURST=n`` publishes n messages at once instead of one).

With ``extras`` (the long schedule, and a short second CI test) KV compare-and-set
writers, a deleter (message deletes, filtered purges) and consumers created and deleted
run beside them (chaos_workers.py); the faults then also hit the leaders of their groups
and of the meta group, a server flaps (killed again as soon as it serves), one fault of
the schedule is a full restart (SIGKILL every server), and in a cluster of five two
servers are out at once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import nats
import nats.errors
import nats.js.errors
import nats.js.kv
import pytest

from tests.cluster.chaos_workers import (
    DEL_STREAM,
    KV_STREAM,
    ConsumerChurn,
    Deleter,
    KvWriters,
    create_assets,
)
from tests.cluster.conftest import ClusterFactory
from tests.cluster.harness import Cluster, Node, wait_until

STREAM = "CHAOS"
PROGRESS = 15  # acknowledged messages that prove the cluster works around (or after) a fault
RETRYABLE = (nats.errors.TimeoutError, nats.errors.NoRespondersError,
             nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError,
             nats.js.errors.NoStreamResponseError, nats.js.errors.ServiceUnavailableError)


@dataclass
class Ledger:
    """What the clients were promised."""

    acked: dict[int, int] = field(default_factory=dict)  # message number -> stream sequence
    confirmed: set[int] = field(default_factory=set)  # stream sequences whose ack was confirmed
    delivered: set[int] = field(default_factory=set)
    done: bool = False

    workers: list[asyncio.Future[None]] = field(default_factory=list)

    async def progress(self, count: int, what: str) -> None:
        want = len(self.acked) + count

        deadline = time.monotonic() + 60
        while len(self.acked) < want:
            for worker in self.workers:
                if worker.done():
                    worker.result()  # a client that failed fails the test with its error
                    raise AssertionError("a client stopped early")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {count} more acks {what}")
            await asyncio.sleep(0.05)


class Clients:
    """One connection per server, used in turn: a request that fails moves on to the next
    server, as an application with a list of servers would (a server cut off from the
    others keeps its clients connected, but cannot serve them). Connections are pinned to
    their server (nats-py would otherwise follow the servers it discovers, and after a few
    faults every connection may sit on the same one); a dropped one is dialed again."""

    def __init__(self, cl: Cluster) -> None:
        self.cl = cl
        self.conns: dict[str, nats.NATS] = {}
        self.turn = 0
        self.errors: list[str] = []  # the last failed attempts (shown when the test fails)

    async def current(self) -> nats.NATS:
        """The connection to this turn's server; servers that cannot be reached are skipped."""
        for _ in range(len(self.cl.nodes) * 20):  # bounded: some server is always up
            turn = self.turn
            node = self.cl.nodes[turn % len(self.cl.nodes)]
            nc = self.conns.get(node.name)
            if nc is not None and nc.is_connected:
                return nc
            try:
                nc = await asyncio.wait_for(nats.connect(
                    node.url, allow_reconnect=False, connect_timeout=1, max_reconnect_attempts=0,
                    ping_interval=1, max_outstanding_pings=2), 3.0)
            except Exception as exc:
                self.note(node.name, exc)
                self.rotate(turn)
                await asyncio.sleep(0.05)
                continue
            self.conns[node.name] = nc
            return nc
        raise AssertionError("no server could be reached")

    def note(self, where: str, exc: BaseException) -> None:
        self.errors.append(f"{where} {exc!r}"[:120])
        del self.errors[:-20]

    def rotate(self, seen: int | None = None) -> None:
        """Move on to the next server; with ``seen`` (the turn a failed attempt used) only
        if no other attempt moved on meanwhile: many publishes in flight that fail together
        move on once, not once each (with 25 in flight and 5 servers, they came back to the
        same dead server every time)."""
        if seen is None or seen == self.turn:
            self.turn += 1

    async def close(self) -> None:
        for nc in self.conns.values():
            with contextlib.suppress(Exception):
                await nc.close()


async def _publisher(clients: Clients, ledger: Ledger, limit: int, burst: int = 1) -> None:
    """Messages in runs of ``burst`` published at once; a run is finished (every message
    in it acknowledged) even when the schedule ends meanwhile."""
    for start in range(0, limit, burst):
        if ledger.done:
            return
        await asyncio.gather(*(_publish_one(clients, ledger, i)
                               for i in range(start, start + burst)))


async def _publish_one(clients: Clients, ledger: Ledger, i: int) -> None:
    for _ in range(600):  # bounded: a message that is never acknowledged fails the test
        nc = await clients.current()
        turn = clients.turn
        try:
            # Bounded from outside too: nats-py's publish can wait on a dead socket.
            ack = await asyncio.wait_for(nc.jetstream().publish(
                f"chaos.{i % 7}", b"msg %d" % i, timeout=1.0,
                headers={"Nats-Msg-Id": f"m{i}"}), 3.0)
        except (*RETRYABLE, TimeoutError, nats.js.errors.APIError) as exc:
            if isinstance(exc, nats.js.errors.APIError) and not isinstance(
                    exc, nats.js.errors.ServiceUnavailableError | RETRYABLE):
                raise
            clients.note(nc.connected_url.netloc if nc.connected_url else "?", exc)
            clients.rotate(turn)
            await asyncio.sleep(0.05)
            continue
        ledger.acked[i] = ack.seq
        return
    raise AssertionError(f"message {i} was never acknowledged")


async def _consumer(clients: Clients, ledger: Ledger) -> None:
    sub = None
    while not ledger.done:
        try:
            if sub is None:
                js = (await clients.current()).jetstream()
                sub = await js.pull_subscribe("chaos.>", durable="work", stream=STREAM)
            msgs = await asyncio.wait_for(sub.fetch(20, timeout=1.0), 3.0)
        except (*RETRYABLE, TimeoutError, nats.js.errors.APIError,
                nats.errors.SlowConsumerError):
            clients.rotate()
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
                sub = None
            await asyncio.sleep(0.05)
            continue
        for msg in msgs:
            seq = msg.metadata.sequence.stream
            ledger.delivered.add(seq)
            with contextlib.suppress(*RETRYABLE, TimeoutError):
                await asyncio.wait_for(msg.ack_sync(timeout=1.0), 3.0)
                ledger.confirmed.add(seq)


def _live(cl: Cluster, but: Node | None = None) -> list[Node]:
    return [n for n in cl.nodes if n.running and not n.paused and n is not but]


async def _stream_leader(cl: Cluster, stream: str = STREAM) -> str:
    async def ask() -> str | None:
        nc = await cl.connect(_live(cl)[0])
        try:
            info = await nc.jetstream().stream_info(stream)
            return info.cluster.leader if info.cluster and info.cluster.leader else None
        finally:
            await nc.close()

    return await wait_until(ask, 30, f"a leader for {stream}")


async def _stream_peers(cl: Cluster) -> list[str]:
    async def ask() -> list[str] | None:
        nc = await cl.connect(_live(cl)[0])
        try:
            info = await nc.jetstream().stream_info(STREAM)
            if not info.cluster or not info.cluster.leader:
                return None
            return [info.cluster.leader] + [r.name for r in info.cluster.replicas or []]
        finally:
            await nc.close()

    return await wait_until(ask, 30, "the stream's replicas")


async def _restart_all(cl: Cluster, ledger: Ledger) -> str:
    """SIGKILL every server, start them all again: what was promised survives."""
    for node in cl.nodes:
        node.kill()
    for node in cl.nodes:
        node.start()
    await cl.wait_mesh(60)
    await cl.wait_jetstream(60)
    await ledger.progress(PROGRESS, "after a full restart")
    return "restart-all"


async def _two_at_once(cl: Cluster, rng: random.Random, ledger: Ledger) -> str:
    """Two servers out at once (each killed, frozen or partitioned; the partitioned ones
    together on their side), at most one of them the main stream's replica: the meta group
    and the stream keep their quorums (the other streams may lose theirs)."""
    peers = set(await _stream_peers(cl))
    first = rng.choice([n for n in _live(cl) if n.name not in peers])
    second = rng.choice(_live(cl, but=first))
    kinds = {first.name: rng.choice(["kill", "stop", "partition"]),
             second.name: rng.choice(["kill", "stop", "partition"])}
    victims = (first, second)
    cut = [v for v in victims if kinds[v.name] == "partition"]
    rest = [n for n in _live(cl) if n not in victims]
    for victim in victims:
        if kinds[victim.name] == "kill":
            victim.kill()
        elif kinds[victim.name] == "stop":
            victim.pause()
    if cut:
        cl.partition(cut, rest)
    what = " and ".join(f"{kinds[v.name]} {v.name}" for v in victims)
    await ledger.progress(PROGRESS, f"during {what}")
    cl.heal()
    for victim in victims:
        if kinds[victim.name] == "kill":
            victim.start()
        elif kinds[victim.name] == "stop":
            victim.resume()
    for victim in victims:
        await cl.wait_serving(victim)
    await ledger.progress(PROGRESS, f"after {what}")
    return f"two: {what}"


async def _flap(cl: Cluster, rng: random.Random, ledger: Ledger) -> str:
    """A server killed, started, and killed again as soon as it serves (before it caught
    up with what it missed), then started for good."""
    victim = rng.choice(_live(cl))
    victim.kill()
    await ledger.progress(PROGRESS, f"while {victim.name} is down")
    victim.start()
    await cl.wait_serving(victim)
    victim.kill()
    await ledger.progress(PROGRESS, f"while {victim.name} is down again")
    victim.start()
    await cl.wait_serving(victim)
    await ledger.progress(PROGRESS, f"after {victim.name} came back")
    return f"flap {victim.name}"


async def _leader_of(cl: Cluster, rng: random.Random, extras: bool) -> str:
    """The leader of the main stream, or with the extra clients of one of their streams or
    of the meta group."""
    which = rng.choice([STREAM, KV_STREAM, DEL_STREAM, "meta"] if extras else [STREAM])
    if which == "meta":
        return await cl.wait_jetstream(30, nodes=_live(cl))
    return await _stream_leader(cl, which)


async def _fault(cl: Cluster, rng: random.Random, ledger: Ledger, extras: bool = False) -> str:
    """One fault on one server (or two, in a cluster of five or more), held until the
    others made progress; then healed."""
    kinds = ["kill", "stop", "partition", "stepdown", "kill-leader"]
    if extras:
        kinds += ["stop-leader", "partition-leader", "flap"]
    if len(cl.nodes) >= 5:
        kinds += ["two", "two"]
    kind = rng.choice(kinds)
    if kind == "two":
        return await _two_at_once(cl, rng, ledger)
    if kind == "flap":
        return await _flap(cl, rng, ledger)
    leader = await _leader_of(cl, rng, extras) if kind.endswith("-leader") else ""
    label, kind = kind, kind.removesuffix("-leader") if kind != "kill-leader" else kind
    victim = cl.node(leader) if leader else rng.choice(_live(cl))
    heal: Callable[[], Awaitable[None]]
    if kind in ("kill", "kill-leader"):
        victim.kill()

        async def heal() -> None:
            victim.start()
            await cl.wait_serving(victim)
    elif kind == "stop":
        victim.pause()

        async def heal() -> None:
            victim.resume()
    elif kind == "partition":
        cl.partition([victim], _live(cl, but=victim))

        async def heal() -> None:
            cl.heal()
    else:
        subject = f"$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}"
        if extras:  # or another group's leader: a stream's, the consumer's, the meta group's
            subject = rng.choice([subject, f"$JS.API.STREAM.LEADER.STEPDOWN.{KV_STREAM}",
                                  f"$JS.API.STREAM.LEADER.STEPDOWN.{DEL_STREAM}",
                                  f"$JS.API.CONSUMER.LEADER.STEPDOWN.{STREAM}.work",
                                  "$JS.API.META.LEADER.STEPDOWN"])
            label = "stepdown " + subject.split(".")[2].lower()
        meta = subject.startswith("$JS.API.META")
        nc = await (cl.connect_system if meta else cl.connect)(_live(cl)[0])
        with contextlib.suppress(Exception):  # no leader at this instant is fine too
            await nc.request(subject, b"", timeout=2)
        await nc.close()

        async def heal() -> None:
            return None
    await ledger.progress(PROGRESS, f"while {victim.name} suffers {kind}")
    await heal()
    await ledger.progress(PROGRESS, f"after healing {kind} of {victim.name}")
    return f"{label} {victim.name}"


async def _settle_and_check(cl: Cluster, ledger: Ledger) -> None:
    await cl.wait_mesh(60)
    total = len(ledger.acked)
    assert sorted(ledger.acked.values()) == list(range(1, total + 1)), "gaps or duplicates"

    def agreed() -> bool:
        held = cl.stream_messages(STREAM)
        return len(held) == 3 and set(held.values()) == {total}

    await wait_until(agreed, 60, "every replica to hold every acknowledged message")
    nc = await cl.connect(cl.nodes[0])
    js = nc.jetstream()
    for i, seq in sorted(ledger.acked.items())[:: max(1, total // 200)]:
        msg = await js.get_msg(STREAM, seq)
        assert msg.data == b"msg %d" % i, f"sequence {seq} holds {msg.data!r}, not message {i}"
    # Every confirmed ack holds: draining the consumer (what was delivered and not acked
    # comes back after ack_wait) never brings one back.
    sub = await js.pull_subscribe("chaos.>", durable="work", stream=STREAM)
    redelivered: set[int] = set()

    async def drained() -> bool:
        with contextlib.suppress(nats.errors.TimeoutError, TimeoutError):
            for msg in await sub.fetch(200, timeout=1.0):
                seq = msg.metadata.sequence.stream
                redelivered.add(seq)
                ledger.delivered.add(seq)
                await msg.ack()  # a lost ack only brings the message back: fetched again
            await nc.flush()
        info = await js.consumer_info(STREAM, "work")
        floor[0] = info.ack_floor.stream_seq
        return floor[0] == total and info.num_pending == 0

    # A backlog takes as long as it takes; what must not happen is a consumer that stops
    # moving: each wait is for the ack floor to advance (or the end).
    floor = [0]
    while True:
        before = floor[0]

        async def moved(before: int = before) -> str | None:
            if await drained():
                return "drained"
            return "moved" if floor[0] > before else None

        got = await wait_until(moved, 60, f"the consumer's ack floor to pass {before} of {total}")
        if got == "drained":
            break
    assert not redelivered & ledger.confirmed, "confirmed acks came back"
    assert ledger.delivered == set(range(1, total + 1)), "messages never delivered"
    await nc.close()


@dataclass
class Extras:
    """The KV, delete/purge and consumer-churn clients (chaos_workers.py)."""

    kv: KvWriters
    deleter: Deleter
    churn: ConsumerChurn
    clients: list[Clients]

    @classmethod
    def start(cls, cl: Cluster, rng: random.Random, ledger: Ledger) -> Extras:
        ex = cls(KvWriters(), Deleter(random.Random(rng.random())),
                 ConsumerChurn(random.Random(rng.random())), [Clients(cl) for _ in range(4)])
        a, b, d, c = ex.clients
        b.turn = 1  # the two KV writers start on different servers
        ledger.workers += [asyncio.ensure_future(ex.kv.run("a", a, ledger)),
                           asyncio.ensure_future(ex.kv.run("b", b, ledger)),
                           asyncio.ensure_future(ex.deleter.run(d, ledger)),
                           asyncio.ensure_future(ex.churn.run(c, ledger))]
        return ex

    async def check(self, cl: Cluster) -> None:
        nc = await cl.connect(cl.nodes[0])
        try:
            print(await self.kv.check(cl, nc))
            print(await self.deleter.check(cl, nc))
            print(await self.churn.check(cl))
        finally:
            await nc.close()

    async def close(self) -> None:
        for clients in self.clients:
            await clients.close()


async def _run_chaos(make_cluster: ClusterFactory, nodes: int, faults: int, seed: int,
                     *, extras: bool = False, restart_all: bool = False, burst: int = 1
                     ) -> None:
    """``faults`` seeded faults; with ``extras`` the KV, delete and consumer clients run
    too, and with ``restart_all`` one of the faults (a seeded one) is a full restart."""
    rng = random.Random(seed)
    cl = make_cluster(nodes, proxies=True)
    await cl.start()
    await cl.wait_jetstream()
    admin = await cl.connect(cl.nodes[0])
    js = admin.jetstream()

    async def created() -> bool:  # "temporarily unavailable" during an election: retry
        try:
            await js.add_stream(name=STREAM, subjects=["chaos.>"], num_replicas=3,
                                duplicate_window=600.0)
            await js.add_consumer(STREAM, nats.js.api.ConsumerConfig(
                durable_name="work", ack_policy=nats.js.api.AckPolicy.EXPLICIT, ack_wait=5.0))
            if extras:
                await create_assets(js)
                await nats.js.kv.KeyValue(
                    name="CHAOSKV", stream="KV_CHAOSKV", pre="$KV.CHAOSKV.", js=js,
                    direct=True).put("k", b"seed")
        except nats.js.errors.ServiceUnavailableError:
            return False
        return True

    await wait_until(created, 30, "the stream and its consumer")
    await admin.close()
    ledger = Ledger()
    pubs, subs = Clients(cl), Clients(cl)
    publisher = asyncio.ensure_future(_publisher(pubs, ledger, limit=10_000_000, burst=burst))
    consumer = asyncio.ensure_future(_consumer(subs, ledger))
    ledger.workers = [publisher, consumer]
    extra = Extras.start(cl, rng, ledger) if extras else None
    full_restart_at = rng.randrange(faults) if restart_all else -1
    done: list[str] = []
    try:
        await ledger.progress(PROGRESS, "before the first fault")
        for i in range(faults):
            if i == full_restart_at:
                done.append(await _restart_all(cl, ledger))
            else:
                done.append(await _fault(cl, rng, ledger, extras))
        ledger.done = True
        await asyncio.gather(*ledger.workers)
        await _settle_and_check(cl, ledger)
        if extra is not None:
            await extra.check(cl)
        print(f"seed {seed}, faults {done}")
    except BaseException as exc:
        for node in _live(cl):  # what each server's groups looked like when it failed
            with contextlib.suppress(Exception):
                print(f"----- {node.name} /raftz -----\n{json.dumps(node.http('/raftz'))}")
            try:
                probe = await cl.connect(node)
                ack = await probe.jetstream().publish("chaos.probe", b"probe", timeout=2)
                print(f"{node.name}: probe publish acked {ack}")
                await probe.close()
            except Exception as probe_exc:
                print(f"{node.name}: probe publish failed: {probe_exc!r}")
        print(f"publisher at message {len(ledger.acked)}, turn {pubs.turn}")
        print("last publish errors:\n  " + "\n  ".join(pubs.errors))
        raise AssertionError(f"seed {seed}, faults {done}: {exc}") from exc
    finally:
        ledger.done = True
        for task in ledger.workers:
            task.cancel()
        await pubs.close()
        await subs.close()
        if extra is not None:
            await extra.close()


def _seed() -> int:
    return int(os.environ.get("JETRAFT_CHAOS_SEED") or random.SystemRandom().randrange(10**6))


@pytest.mark.timeout(420)
async def test_faults_on_a_three_server_cluster(make_cluster: ClusterFactory) -> None:
    await _run_chaos(make_cluster, 3, faults=6, seed=_seed())


@pytest.mark.timeout(300)
async def test_kv_deletes_and_consumers_under_faults(make_cluster: ClusterFactory) -> None:
    """A short schedule with one full restart, while the KV, delete/purge and consumer
    clients run beside the publisher and the consumer."""
    await _run_chaos(make_cluster, 3, faults=3, seed=_seed(), extras=True, restart_all=True)


@pytest.mark.slow
@pytest.mark.timeout(3600)
async def test_long_fault_schedule(make_cluster: ClusterFactory) -> None:
    nodes = int(os.environ.get("JETRAFT_CHAOS_NODES", "5"))
    faults = int(os.environ.get("JETRAFT_CHAOS_FAULTS", "60"))
    burst = int(os.environ.get("JETRAFT_CHAOS_BURST", "1"))  # messages published at once
    await _run_chaos(make_cluster, nodes, faults=faults, seed=_seed(), extras=True,
                     restart_all=True, burst=burst)
