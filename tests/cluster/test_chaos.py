"""A seeded fault schedule against a working cluster: while clients publish (retrying with
Nats-Msg-Id) and consume with confirmed acks, one server at a time is killed, frozen,
partitioned away or made to step down. Afterwards every acknowledged message is stored
exactly once, every replica holds the same messages, and every confirmed ack holds.

Each fault lasts until the others have acknowledged more messages (the cluster made
progress without that server), and the next comes once the cluster made progress after
healing, so the schedule waits on conditions, not on time. CI runs a short schedule;
``JETRAFT_CHAOS_FAULTS=60 JETRAFT_CHAOS_NODES=5 pytest -m slow tests/cluster/test_chaos.py``
runs a long one (``JETRAFT_CHAOS_SEED`` replays a schedule; the seed is printed on failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import nats
import nats.errors
import nats.js.errors
import pytest

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

    async def progress(self, count: int, what: str) -> None:
        want = len(self.acked) + count
        await wait_until(lambda: len(self.acked) >= want, 60, f"{count} more acks {what}")


class Clients:
    """One client per server, used in turn: a request that fails moves on to the next
    server, as an application with a list of servers would (a server cut off from the
    others keeps its clients connected, but cannot serve them)."""

    def __init__(self, conns: list[nats.NATS]) -> None:
        self.conns = conns
        self.turn = 0
        self.stalls: list[str] = []  # requests the client library held past their timeout

    @classmethod
    async def open(cls, cl: Cluster) -> Clients:
        conns = [await nats.connect(
            n.url, allow_reconnect=True, max_reconnect_attempts=-1, reconnect_time_wait=0.2,
            ping_interval=1, max_outstanding_pings=2, connect_timeout=2) for n in cl.nodes]
        return cls(conns)

    def current(self) -> nats.NATS:
        return self.conns[self.turn % len(self.conns)]

    def rotate(self) -> None:
        self.turn += 1

    async def close(self) -> None:
        for nc in self.conns:
            with contextlib.suppress(Exception):
                await nc.close()


async def _publisher(clients: Clients, ledger: Ledger, limit: int) -> None:
    for i in range(limit):
        if ledger.done:
            return
        for _ in range(600):  # bounded: a message that is never acknowledged fails the test
            nc = clients.current()
            try:
                # Bounded from outside too: nats-py's publish can wait on a reconnect.
                ack = await asyncio.wait_for(nc.jetstream().publish(
                    f"chaos.{i % 7}", b"msg %d" % i, timeout=1.0,
                    headers={"Nats-Msg-Id": f"m{i}"}), 3.0)
            except TimeoutError:
                clients.stalls.append(f"{nc.connected_url} connected={nc.is_connected} "
                                      f"reconnecting={nc.is_reconnecting}")
                clients.rotate()
                continue
            except RETRYABLE:
                clients.rotate()
                await asyncio.sleep(0.05)
                continue
            except nats.js.errors.APIError as exc:
                if exc.err_code not in (10008, None) and exc.code != 503:
                    raise
                clients.rotate()
                await asyncio.sleep(0.05)
                continue
            ledger.acked[i] = ack.seq
            break
        else:
            raise AssertionError(f"message {i} was never acknowledged")


async def _consumer(clients: Clients, ledger: Ledger) -> None:
    sub = None
    while not ledger.done:
        try:
            if sub is None:
                js = clients.current().jetstream()
                sub = await js.pull_subscribe("chaos.>", durable="work", stream=STREAM)
            msgs = await sub.fetch(20, timeout=1.0)
        except (*RETRYABLE, nats.js.errors.APIError, nats.errors.SlowConsumerError):
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
            with contextlib.suppress(*RETRYABLE):
                await msg.ack_sync(timeout=1.0)
                ledger.confirmed.add(seq)


def _live(cl: Cluster, but: Node | None = None) -> list[Node]:
    return [n for n in cl.nodes if n.running and not n.paused and n is not but]


async def _stream_leader(cl: Cluster) -> str:
    async def ask() -> str | None:
        nc = await cl.connect(_live(cl)[0])
        try:
            info = await nc.jetstream().stream_info(STREAM)
            return info.cluster.leader if info.cluster and info.cluster.leader else None
        finally:
            await nc.close()

    return await wait_until(ask, 30, "a stream leader")


async def _fault(cl: Cluster, rng: random.Random, ledger: Ledger) -> str:
    """One fault on one server, held until the others made progress; then healed."""
    kind = rng.choice(["kill", "stop", "partition", "stepdown", "kill-leader"])
    leader = await _stream_leader(cl) if kind == "kill-leader" else ""
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
        nc = await cl.connect(_live(cl)[0])
        with contextlib.suppress(Exception):  # no leader at this instant is fine too
            await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}", b"", timeout=2)
        await nc.close()

        async def heal() -> None:
            return None
    await ledger.progress(PROGRESS, f"while {victim.name} suffers {kind}")
    await heal()
    await ledger.progress(PROGRESS, f"after healing {kind} of {victim.name}")
    return f"{kind} {victim.name}"


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
        with contextlib.suppress(nats.errors.TimeoutError):
            for msg in await sub.fetch(100, timeout=1.0):
                seq = msg.metadata.sequence.stream
                redelivered.add(seq)
                ledger.delivered.add(seq)
                await msg.ack_sync()
        info = await js.consumer_info(STREAM, "work")
        return info.ack_floor.stream_seq == total and info.num_pending == 0

    await wait_until(drained, 60, "the consumer to be drained")
    assert not redelivered & ledger.confirmed, "confirmed acks came back"
    assert ledger.delivered == set(range(1, total + 1)), "messages never delivered"
    await nc.close()


async def _run_chaos(make_cluster: ClusterFactory, nodes: int, faults: int, seed: int) -> None:
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
        except nats.js.errors.ServiceUnavailableError:
            return False
        return True

    await wait_until(created, 30, "the stream and its consumer")
    await admin.close()
    ledger = Ledger()
    pubs, subs = await Clients.open(cl), await Clients.open(cl)
    publisher = asyncio.ensure_future(_publisher(pubs, ledger, limit=100_000))
    consumer = asyncio.ensure_future(_consumer(subs, ledger))
    done: list[str] = []
    try:
        await ledger.progress(PROGRESS, "before the first fault")
        for _ in range(faults):
            if publisher.done():
                publisher.result()  # its failure, if any
            done.append(await _fault(cl, rng, ledger))
        ledger.done = True
        await asyncio.gather(publisher, consumer)
        await _settle_and_check(cl, ledger)
        print(f"faults {done}; client stalls: {pubs.stalls}")
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
        print(f"publisher at message {len(ledger.acked)}, turn {pubs.turn}, stalls {pubs.stalls}")
        raise AssertionError(f"seed {seed}, faults {done}: {exc}") from exc
    finally:
        ledger.done = True
        for task in (publisher, consumer):
            task.cancel()
        await pubs.close()
        await subs.close()


def _seed() -> int:
    return int(os.environ.get("JETRAFT_CHAOS_SEED") or random.SystemRandom().randrange(10**6))


@pytest.mark.timeout(420)
async def test_faults_on_a_three_server_cluster(make_cluster: ClusterFactory) -> None:
    await _run_chaos(make_cluster, 3, faults=6, seed=_seed())


@pytest.mark.slow
@pytest.mark.timeout(3600)
async def test_long_fault_schedule(make_cluster: ClusterFactory) -> None:
    nodes = int(os.environ.get("JETRAFT_CHAOS_NODES", "5"))
    faults = int(os.environ.get("JETRAFT_CHAOS_FAULTS", "60"))
    await _run_chaos(make_cluster, nodes, faults=faults, seed=_seed())
