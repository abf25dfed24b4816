"""Clustered streams under the faults real clusters meet: SIGKILL and SIGSTOP of leaders,
quorum loss, network partitions, full restarts. Every acknowledged message must survive;
nothing is acknowledged without a quorum."""

from __future__ import annotations

import asyncio
import json
import shutil

import nats
import nats.errors
import nats.js.errors
import pytest

from tests.cluster.conftest import ClusterFactory
from tests.cluster.harness import Cluster, Node, stream_leader, wait_until

pytestmark = [pytest.mark.timeout(300)]

NO_ACK = (nats.errors.TimeoutError, nats.errors.NoRespondersError,
          nats.js.errors.NoStreamResponseError)


async def _publish_reliably(
    nc: nats.NATS, subject: str, i: int, attempts: int = 40
) -> tuple[int, bool]:
    """Publish message i with Nats-Msg-Id; retry until acknowledged (bounded)."""
    js = nc.jetstream()
    for _ in range(attempts):
        try:
            ack = await js.publish(subject, b"msg %d" % i, timeout=1.0,
                                   headers={"Nats-Msg-Id": f"id-{i}"})
            return ack.seq, bool(ack.duplicate)
        except NO_ACK:
            await asyncio.sleep(0.1)
        except nats.js.errors.APIError as exc:
            if exc.err_code != 10008:
                raise
            await asyncio.sleep(0.1)
    raise AssertionError(f"message {i} never acknowledged")


async def _check_all_present(nc: nats.NATS, stream: str, acked: dict[int, int]) -> None:
    js = nc.jetstream()
    info = await js.stream_info(stream)
    assert info.state.messages == len(acked)
    assert sorted(acked.values()) == list(range(1, len(acked) + 1))  # no gaps, no duplicates
    for i, seq in acked.items():
        msg = await js.get_msg(stream, seq)
        assert msg.data == b"msg %d" % i


def _other(cl: Cluster, *names: str) -> Node:
    return next(n for n in cl.nodes if n.name not in names and n.running and not n.paused)


async def test_sigkill_of_the_stream_leader_during_a_publish_loop(
    make_cluster: ClusterFactory,
) -> None:
    cl = make_cluster(3)
    await cl.start()
    await cl.wait_jetstream()
    admin = await cl.connect(cl.nodes[0])
    await admin.jetstream().add_stream(name="KILL", subjects=["kill"], num_replicas=3)
    leader = await stream_leader(admin, "KILL")
    await admin.close()
    client_node = _other(cl, leader)
    nc = await cl.connect(client_node)
    acked: dict[int, int] = {}
    for i in range(300):
        if i == 100:
            cl.node(leader).kill()
        seq, _ = await _publish_reliably(nc, "kill", i)
        acked[i] = seq
    await _check_all_present(nc, "KILL", acked)
    assert await stream_leader(nc, "KILL") != leader
    # The killed server comes back and catches up with what it missed.
    cl.node(leader).start()
    await cl.wait_mesh()
    await wait_until(lambda: cl.stream_messages("KILL") == {n.name: 300 for n in cl.nodes},
                     30, "the restarted replica to catch up")
    await nc.close()


async def test_every_publish_through_a_just_restarted_server_is_acknowledged(
    make_cluster: ClusterFactory,
) -> None:
    """A server back from SIGKILL relays publishes to the stream's leader as soon as it has
    a route to it, and each one gets its PubAck. (Its peers, still backing off from their
    failed dials, used to dial it again after it had dialed them; closing the duplicate
    route dropped the PubAcks it was carrying.)"""
    cl = make_cluster(3)
    await cl.start()
    await cl.wait_jetstream()
    admin = await cl.connect(cl.nodes[0])
    await admin.jetstream().add_stream(name="BACK", subjects=["back"], num_replicas=3)
    leader = await stream_leader(admin, "BACK")
    await admin.close()
    node = _other(cl, leader)
    node.kill()
    node.start()
    await cl.wait_serving(node)
    nc = await cl.connect(node)
    # Until the route to the leader (and its interest) is up, a refusal is the answer.
    acked = {0: (await _publish_reliably(nc, "back", 0))[0]}
    js = nc.jetstream()
    for i in range(1, 300):
        # From here on nothing is lost: a missing PubAck is this timeout.
        ack = await js.publish("back", b"msg %d" % i, timeout=10,
                               headers={"Nats-Msg-Id": f"id-{i}"})
        acked[i] = ack.seq
    await _check_all_present(nc, "BACK", acked)
    await nc.close()


async def test_sigstop_of_the_leader_and_of_a_follower(make_cluster: ClusterFactory) -> None:
    cl = make_cluster(3)
    await cl.start()
    await cl.wait_jetstream()
    admin = await cl.connect(cl.nodes[0])
    await admin.jetstream().add_stream(name="STOP", subjects=["stop"], num_replicas=3)
    leader = await stream_leader(admin, "STOP")
    await admin.close()
    client_node = _other(cl, leader)
    nc = await cl.connect(client_node)
    acked: dict[int, int] = {}
    for i in range(50):
        acked[i], _ = await _publish_reliably(nc, "stop", i)
    cl.node(leader).pause()  # alive but frozen: its sockets stay open
    for i in range(50, 100):
        acked[i], _ = await _publish_reliably(nc, "stop", i)
    new_leader = await stream_leader(nc, "STOP")
    assert new_leader != leader
    cl.node(leader).resume()
    await wait_until(lambda: cl.stream_messages("STOP").get(leader) == 100, 30,
                     "the resumed replica to catch up")
    follower = _other(cl, new_leader, client_node.name)  # a follower, not our server
    follower.pause()
    for i in range(100, 150):
        acked[i], _ = await _publish_reliably(nc, "stop", i)
    follower.resume()
    await _check_all_present(nc, "STOP", acked)
    await wait_until(lambda: cl.stream_messages("STOP") == {n.name: 150 for n in cl.nodes},
                     30, "every replica to hold every message")
    await nc.close()


async def test_no_ack_without_quorum_and_recovery(make_cluster: ClusterFactory) -> None:
    cl = make_cluster(3)
    await cl.start()
    await cl.wait_jetstream()
    n1, n2, n3 = cl.nodes
    nc = await cl.connect(n1)
    js = nc.jetstream()
    await js.add_stream(name="QUORUM", subjects=["q"], num_replicas=3)
    acked = {i: (await _publish_reliably(nc, "q", i))[0] for i in range(20)}
    n2.kill()
    # One server down of three: still a quorum.
    for i in range(20, 40):
        acked[i], _ = await _publish_reliably(nc, "q", i)
    n3.kill()
    # Two down: nothing may be acknowledged.
    for i in range(40, 45):
        with pytest.raises((*NO_ACK, nats.js.errors.APIError)):
            await js.publish("q", b"msg %d" % i, timeout=1.0, headers={"Nats-Msg-Id": f"id-{i}"})
    n3.start()
    await cl.wait_mesh(nodes=[n1, n3])
    for i in range(40, 60):
        acked[i], _ = await _publish_reliably(nc, "q", i)
    n2.start()
    await cl.wait_mesh()
    await _check_all_present(nc, "QUORUM", acked)
    await wait_until(lambda: cl.stream_messages("QUORUM") == {n.name: 60 for n in cl.nodes},
                     30, "every replica to catch up")
    await nc.close()


async def test_partitioned_leader_never_acknowledges(make_cluster: ClusterFactory) -> None:
    """...and, cut off, its stream's and consumer's leader steps down and advises the lost
    quorum (QUORUM_LOST, as nats-server) to the clients on its side."""
    cl = make_cluster(3, proxies=True)
    await cl.start()
    await cl.wait_jetstream()
    admin = await cl.connect(cl.nodes[0])
    ajs = admin.jetstream()
    await ajs.add_stream(name="PART", subjects=["part.>"], num_replicas=3)
    await ajs.add_consumer("PART", durable_name="pc", ack_policy="explicit")

    async def leaders_together() -> str | None:
        """The stream's leader, once the consumer's is on the same server."""
        leader = await stream_leader(admin, "PART")
        info = await ajs.consumer_info("PART", "pc")
        if leader and info.cluster is not None and info.cluster.leader == leader:
            return leader
        if leader:
            body = json.dumps({"placement": {"preferred": leader}}).encode()
            await admin.request("$JS.API.CONSUMER.LEADER.STEPDOWN.PART.pc", body, timeout=5)
        return None

    leader = await wait_until(leaders_together, 30, "the consumer's leader on the stream's")
    await admin.close()
    lnode = cl.node(leader)
    others = [n for n in cl.nodes if n is not lnode]
    minority = await cl.connect(lnode)
    lost = await minority.subscribe("$JS.EVENT.ADVISORY.*.QUORUM_LOST.>")
    await minority.flush()
    majority = await cl.connect(others[0])
    acked = {i: (await _publish_reliably(majority, "part.x", i))[0] for i in range(20)}
    cl.partition([lnode], others)
    # The isolated leader's side may take the message but can never commit it.
    for i in range(3):
        with pytest.raises(NO_ACK):
            await minority.jetstream().publish("part.lost", b"lost %d" % i, timeout=1.5)
    advised = {}
    for _ in range(2):
        msg = await lost.next_msg(timeout=15)
        advised[msg.subject] = json.loads(msg.data)
    prefix = "$JS.EVENT.ADVISORY."
    assert sorted(advised) == [prefix + "CONSUMER.QUORUM_LOST.PART.pc",
                               prefix + "STREAM.QUORUM_LOST.PART"]
    for body in advised.values():
        assert body["type"].endswith("_quorum_lost")
        assert (body["stream"], body.get("consumer", "pc")) == ("PART", "pc")
        assert sorted(r["name"] for r in body["replicas"]) == sorted(n.name for n in cl.nodes)
    for i in range(20, 40):
        acked[i], _ = await _publish_reliably(majority, "part.x", i)
    cl.heal()
    await wait_until(lambda: cl.stream_messages("PART") == {n.name: 40 for n in cl.nodes},
                     30, "the healed replica to converge")
    await _check_all_present(majority, "PART", acked)
    await minority.close()
    await majority.close()


async def test_full_restart_keeps_every_acknowledged_message(
    make_cluster: ClusterFactory,
) -> None:
    cl = make_cluster(3)
    await cl.start()
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[0])
    js = nc.jetstream()
    await js.add_stream(name="DUR", subjects=["dur"], num_replicas=3)
    await js.add_stream(name="ONE", subjects=["one"], num_replicas=1)
    acked = {i: (await _publish_reliably(nc, "dur", i))[0] for i in range(100)}
    await js.publish("one", b"single")
    await nc.close()
    for n in cl.nodes:  # SIGKILL everyone: no shutdown code runs
        n.kill()
    for n in cl.nodes:
        n.start()
    await cl.wait_mesh()
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[1])
    await stream_leader(nc, "DUR")
    await _check_all_present(nc, "DUR", acked)
    await stream_leader(nc, "ONE")
    assert (await nc.jetstream().stream_info("ONE")).state.messages == 1
    for n in cl.nodes:  # and a clean stop/start
        n.stop()
    for n in cl.nodes:
        n.start()
    await cl.wait_mesh()
    await cl.wait_jetstream()
    nc2 = await cl.connect(cl.nodes[2])
    await stream_leader(nc2, "DUR")
    await _check_all_present(nc2, "DUR", acked)
    await nc.close()
    await nc2.close()


async def test_a_server_that_lost_its_files_is_repaired_from_its_peers(
    make_cluster: ClusterFactory,
) -> None:
    cl = make_cluster(3)
    await cl.start()
    await cl.wait_jetstream()
    nc = await cl.connect(cl.nodes[0])
    js = nc.jetstream()
    await js.add_stream(name="LOST", subjects=["lost"], num_replicas=3)
    acked = {i: (await _publish_reliably(nc, "lost", i))[0] for i in range(50)}
    leader = await stream_leader(nc, "LOST")
    victim = next(n for n in cl.nodes if n.name != leader and n is not cl.nodes[0])
    victim.kill()
    raft_dir = victim.store_dir / "jetstream" / "_raft_"
    stream_groups = [p for p in raft_dir.iterdir() if p.name.startswith("S-")]
    assert stream_groups
    for group in stream_groups:  # its copy of the stream (log and store) is gone
        for f in group.iterdir():
            if f.is_dir():
                shutil.rmtree(f)
            else:
                f.unlink()
    victim.start()
    await cl.wait_mesh()
    await wait_until(lambda: cl.stream_messages("LOST").get(victim.name) == 50, 30,
                     "the emptied replica to be repaired")
    # The repaired replica can lead: what it holds is what the quorum held.
    for n in cl.nodes:
        if n is not victim:
            n.kill()
    for n in cl.nodes:
        if n is not victim:
            n.start()
    await cl.wait_mesh()
    nc2 = await cl.connect(victim)
    await stream_leader(nc2, "LOST")
    await _check_all_present(nc2, "LOST", acked)
    await nc.close()
    await nc2.close()


async def test_a_step_down_whose_successor_cannot_take_over_still_ends_the_leadership(
    make_cluster: ClusterFactory,
) -> None:
    """The step-down names a replica that is paused (SIGSTOP: alive, silent), so the
    hand-over cannot finish. As nats-server's, the step-down still ends the leadership:
    the leader gives up after an election period and the replica that answers is
    elected; publishing continues on it. The same for the meta group."""
    cl = make_cluster(3)
    await cl.start()
    await cl.wait_jetstream()
    client_node = cl.nodes[0]
    nc = await cl.connect(client_node)
    js = nc.jetstream()
    await js.add_stream(name="SD", subjects=["sd"], num_replicas=3)
    acked = {i: (await _publish_reliably(nc, "sd", i))[0] for i in range(10)}
    before = await stream_leader(nc, "SD")
    paused = _other(cl, before, client_node.name)
    answering = _other(cl, before, paused.name)
    paused.pause()
    try:
        body = json.dumps({"placement": {"preferred": paused.name}}).encode()
        reply = await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.SD", body, timeout=5)
        assert json.loads(reply.data).get("success") is True, reply.data

        async def moved() -> str | None:
            info = await js.stream_info("SD")
            lead = info.cluster.leader if info.cluster else None
            return lead if lead and lead != before else None

        assert await wait_until(moved, 20, "the stream leader to change") == answering.name
        acked[10], _ = await _publish_reliably(nc, "sd", 10)
    finally:
        paused.resume()
    await _check_all_present(nc, "SD", acked)
    await wait_until(lambda: cl.stream_messages("SD") == {n.name: 11 for n in cl.nodes},
                     30, "every replica to hold every message")
    await nc.close()

    meta_before = await cl.wait_jetstream()
    sys_node = _other(cl, meta_before)
    paused = _other(cl, meta_before, sys_node.name)
    sysc = await cl.connect_system(sys_node)
    paused.pause()
    try:
        body = json.dumps({"placement": {"preferred": paused.name}}).encode()
        reply = await sysc.request("$JS.API.META.LEADER.STEPDOWN", body, timeout=5)
        assert json.loads(reply.data).get("success") is True, reply.data

        def meta_moved() -> str | None:
            lead = cl.meta_leader()  # as the running servers see it
            return lead if lead and lead != meta_before else None

        assert await wait_until(meta_moved, 20, "the meta leader to change") == sys_node.name
    finally:
        paused.resume()
    await sysc.close()
