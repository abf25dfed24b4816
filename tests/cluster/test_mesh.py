"""The route mesh with real server processes: core NATS across servers."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path

import nats.errors
import pytest
import trustme

from tests.burst import burst, by_sid, encode, expected
from tests.cluster.conftest import ClusterFactory
from tests.cluster.harness import Node, wait_until
from tests.rawclient import RawClient

pytestmark = pytest.mark.timeout(180)


async def test_seed_configs_form_a_mesh_and_route_messages(make_cluster: ClusterFactory) -> None:
    """The seeds' three-server configs (hosts, ports and store_dir substituted): every
    server routes to the other two, and a message published on one reaches subscribers on
    the others exactly once; request/reply and no-responders work across servers."""
    cl = make_cluster(3, jetstream=lambda i: False)
    await cl.start()
    n1, n2, n3 = cl.nodes
    for node in cl.nodes:
        assert node.http("/varz")["cluster"]["name"] == "C1"
        assert node.http("/routez")["num_routes"] == 2
    a, b, c = [await cl.connect(n) for n in (n1, n2, n3)]
    got: dict[str, list[bytes]] = collections.defaultdict(list)

    async def collect(name: str) -> None:
        async def cb(msg: nats.aio.msg.Msg) -> None:
            got[name].append(msg.data)

        await {"b": b, "c": c}[name].subscribe("orders.>", cb=cb)

    await collect("b")
    await collect("c")

    async def helper(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(b"from n3:" + msg.data)

    await c.subscribe("help", cb=helper)
    await c.flush()
    # Interest travels to n1 over the routes: wait until a request finds the helper.
    reply = await wait_until(lambda: a.request("help", b"x", timeout=0.5), what="interest at n1")
    assert reply.data == b"from n3:x"
    for i in range(50):
        await a.publish(f"orders.{i}", str(i).encode())
    await a.flush()
    want = [str(i).encode() for i in range(50)]
    await wait_until(lambda: len(got["b"]) >= 50 and len(got["c"]) >= 50, what="deliveries")
    await asyncio.sleep(0.2)  # bounded negative wait: nothing arrives twice
    assert got["b"] == want and got["c"] == want
    with pytest.raises(nats.errors.NoRespondersError):
        await a.request("nobody.home", b"?", timeout=2)
    for conn in (a, b, c):
        await conn.close()


async def test_a_burst_routed_to_another_server_keeps_order_and_framing(
    make_cluster: ClusterFactory,
) -> None:
    """A burst published on n1 reaches subscriptions on n2 (and on n1) in order, framed as one
    message at a time: groups on a subject only plain subscriptions want travel as one route
    frame, a subject with a queue group message by message."""
    cl = make_cluster(2, jetstream=lambda i: False)
    await cl.start()
    n1, n2 = cl.nodes
    sub = await RawClient.connect(n2.host, n2.port, headers=True)
    await sub.send(b"SUB burst.a 7\r\nSUB burst.> 9\r\nSUB burst.q grp 13\r\n")
    await sub.ping()
    local = await RawClient.connect(n1.host, n1.port, headers=True)
    await local.send(b"SUB burst.a 5\r\n")
    await local.ping()
    # Interest travels in order over the route: once n1 knows the helper's, it knows ours.
    helper, asker = await cl.connect(n2), await cl.connect(n1)

    async def answer(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(b"here")

    await helper.subscribe("probe", cb=answer)
    await helper.flush()
    await wait_until(lambda: asker.request("probe", b"", timeout=0.5), what="interest at n1")
    pub = await RawClient.connect(n1.host, n1.port, headers=True)
    msgs = burst(("burst.a", "burst.q"))
    await pub.send(encode(msgs))
    await pub.ping()
    want = {
        "7": expected(msgs, "7", lambda s: s == "burst.a"),
        "9": expected(msgs, "9", lambda s: s.startswith("burst.")),
        "13": expected(msgs, "13", lambda s: s == "burst.q"),
    }
    assert by_sid(await sub.read_frames(sum(map(len, want.values())))) == want
    mine = expected(msgs, "5", lambda s: s == "burst.a")
    assert await local.read_frames(len(mine)) == mine
    for c in (sub, local, pub):
        await c.ping()  # nothing more arrived
        await c.close()
    await helper.close()
    await asker.close()


async def test_a_server_that_dialed_us_first_is_not_dialed_again(
    make_cluster: ClusterFactory,
) -> None:
    """n1 starts alone, so its dials to n2 fail and back off. n2 then starts and dials n1,
    and the mesh forms. n1's next retry must find n2 already connected: dialing again made
    a duplicate route, and whichever of the two lost was closed with the messages it was
    carrying, up to a second after the mesh had formed."""
    cl = make_cluster(2, proxies=True, jetstream=lambda i: False)
    n1, n2 = cl.nodes
    assert n1.proxy is not None and n2.proxy is not None
    for node in cl.nodes:
        assert node.proxy is not None
        await node.proxy.start()
    cl.write_configs()
    n1.start()
    proxy2 = n2.proxy
    # Each failed dial doubles n1's delay (at most a second, with jitter).
    await wait_until(lambda: proxy2.accepted >= 3, what="n1 dialing n2 in vain")
    n2.start()
    await cl.wait_mesh()
    sub = await cl.connect(n2)
    got: list[bytes] = []

    async def cb(msg: nats.aio.msg.Msg) -> None:
        if msg.reply:
            await msg.respond(b"here")
        else:
            got.append(msg.data)

    await sub.subscribe("steady", cb=cb)
    await sub.flush()
    pub = await cl.connect(n1)
    await wait_until(lambda: pub.request("steady", b"probe", timeout=0.5), what="interest at n1")
    dials = proxy2.accepted

    def routes_held() -> list[tuple[str, int, bool]]:
        return [
            (r["ip"], r["port"], r["did_solicit"])
            for n in cl.nodes
            for r in n.http("/routez")["routes"]
        ]

    held = routes_held()
    assert len(held) == 2
    # Bounded negative wait, paced to outlast n1's longest retry delay (1.5 s): a message
    # every 50 ms, each of which must arrive.
    want = [str(i).encode() for i in range(40)]
    for data in want:
        await pub.publish("steady", data)
        await asyncio.sleep(0.05)
    await pub.flush()
    await wait_until(lambda: len(got) >= len(want), what="the steady messages")
    assert got == want
    assert proxy2.accepted == dials, "n1 dialed n2 again though n2 had dialed it"
    assert routes_held() == held, "the route the mesh formed with was replaced"
    await sub.close()
    await pub.close()


async def test_queue_group_members_across_servers_get_each_message_once(
    make_cluster: ClusterFactory,
) -> None:
    cl = make_cluster(3, jetstream=lambda i: False)
    await cl.start()
    pub = await cl.connect(cl.nodes[0])
    conns = [await cl.connect(n) for n in cl.nodes[1:]]
    seen: list[tuple[int, bytes]] = []
    plain: list[bytes] = []
    for k, conn in enumerate(conns):
        for _ in range(2):  # two members per server

            async def cb(msg: nats.aio.msg.Msg, k: int = k) -> None:
                seen.append((k, msg.data))

            await conn.subscribe("work", queue="workers", cb=cb)

    async def watch(msg: nats.aio.msg.Msg) -> None:
        plain.append(msg.data)

    await conns[0].subscribe("work", cb=watch)
    for conn in conns:
        await conn.flush()
    # At n1: the queue group from n2 and from n3, and n2's plain subscription.
    await wait_until(lambda: cl.nodes[0].http("/subsz")["num_subscriptions"] >= 3,
                     what="interest at n1")
    total = 400
    for i in range(total):
        await pub.publish("work", b"%d" % i)
    await pub.flush()
    await wait_until(lambda: len(plain) >= total, what="plain deliveries")
    await wait_until(lambda: len(seen) >= total, what="queue deliveries")
    await asyncio.sleep(0.2)  # bounded negative wait: no duplicates follow
    assert plain == [b"%d" % i for i in range(total)]
    datas = [d for _, d in seen]
    assert sorted(datas, key=int) == [b"%d" % i for i in range(total)]  # each exactly once
    by_server = collections.Counter(k for k, _ in seen)
    assert set(by_server) == {0, 1}  # both servers' members took a share
    for conn in (pub, *conns):
        await conn.close()


async def test_single_seed_route_gossips_into_a_full_mesh(make_cluster: ClusterFactory) -> None:
    cl = make_cluster(4, jetstream=lambda i: False)
    seed = cl.nodes[0]
    await cl.start(routes=lambda n: [] if n is seed else [seed.route_url])
    for node in cl.nodes:
        assert node.http("/routez")["num_routes"] == 3


async def test_clients_discover_the_other_servers(make_cluster: ClusterFactory) -> None:
    cl = make_cluster(3, jetstream=lambda i: False)
    n1, n2, n3 = cl.nodes
    await cl.start(wait=False)
    await cl.wait_serving(n1)
    # Start with n1 alone reachable, then bring the others up one by one.
    n2.stop()
    n3.stop()
    discovered: list[int] = []

    async def on_discovered() -> None:
        discovered.append(1)

    nc = await cl.connect(n1, discovered_server_cb=on_discovered)
    for other in (n2, n3):
        other.start()
        await cl.wait_mesh(nodes=[n1, other] + ([n2] if other is n3 else []))
        await wait_until(
            lambda other=other: f"{other.host}:{other.port}"
            in {s.netloc for s in nc.discovered_servers},
            what=f"{other.name} discovered",
        )
    assert len(discovered) == 2
    await nc.close()


async def test_restarted_server_rejoins(make_cluster: ClusterFactory) -> None:
    cl = make_cluster(3, jetstream=lambda i: False)
    await cl.start()
    n1, n2, _ = cl.nodes
    n2.kill()
    await wait_until(lambda: n1.http("/routez")["num_routes"] == 1, what="n1 to notice")
    n2.start()
    await cl.wait_mesh()
    a, b = await cl.connect(n1), await cl.connect(n2)

    async def echo(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(msg.data)

    await b.subscribe("again", cb=echo)
    await b.flush()
    reply = await wait_until(lambda: a.request("again", b"hello", timeout=0.5), what="rejoin")
    assert reply.data == b"hello"
    await a.close()
    await b.close()


async def test_duplicate_server_name_is_refused(make_cluster: ClusterFactory) -> None:
    """A server started with a name the cluster already has never joins it."""
    cl = make_cluster(3, jetstream=lambda i: False)
    cl.nodes[2].name_override = "n1-c1"
    n1, n2, dup = cl.nodes
    await cl.start(wait=False)
    dup.stop()  # the impostor comes once n1 and n2 know each other
    await cl.wait_mesh(nodes=[n1, n2])
    dup.start()
    await cl.wait_serving(dup)
    await wait_until(lambda: "duplicate server name" in dup.log() + n2.log(), what="refusal")
    n1_id = n1.http("/varz")["server_id"]
    dup_id = dup.http("/varz")["server_id"]
    # The impostor keeps dialing and keeps being refused: over a bounded window, n1 and n2
    # never list a route to it.
    for _ in range(20):
        for node in (n1, n2):
            ids = {r["remote_id"] for r in node.http("/routez")["routes"]}
            assert dup_id not in ids
        assert {r["remote_id"] for r in n2.http("/routez")["routes"]} == {n1_id}
        await asyncio.sleep(0.05)


async def test_other_cluster_name_is_refused(make_cluster: ClusterFactory) -> None:
    cl = make_cluster(2, jetstream=lambda i: False)
    cl.nodes[1].cluster_name = "OTHER"
    await cl.start(wait=False)
    for node in cl.nodes:
        await cl.wait_serving(node)
    await wait_until(lambda: "does not match" in cl.nodes[0].log(), what="refusal logged")
    assert cl.nodes[0].http("/routez")["num_routes"] == 0


async def test_route_credentials_are_checked(make_cluster: ClusterFactory) -> None:
    cl = make_cluster(3, proxies=True, jetstream=lambda i: False)
    for node in cl.nodes:
        node.cluster_extra = "  authorization { user: ruser, password: rpass }\n"

    def routes(node: Node) -> list[str]:
        secret = "wrong" if node.index == 3 else "rpass"
        return [u.replace("://", f"://ruser:{secret}@") for u in cl.routes_for(node)]

    n1, n2, n3 = cl.nodes
    assert n3.proxy is not None
    # n3 must dial first: n1 and n2 cannot reach it until it has been refused.
    n3.proxy.cut({n1.host, n2.host}, mode="reset")
    await cl.start(wait=False, routes=routes)
    for node in cl.nodes:
        await cl.wait_serving(node)
    await cl.wait_mesh(nodes=[n1, n2])
    # n3 dials with a wrong password and is refused; n1 and n2 dial n3 with the right one,
    # so n3 still joins the mesh through the routes they solicit.
    await wait_until(lambda: "Authorization Violation" in n3.log() + n1.log() + n2.log(),
                     what="refusal")
    n3.proxy.heal()
    await cl.wait_mesh()


async def test_routes_over_mutual_tls(make_cluster: ClusterFactory, tmp_path: Path) -> None:
    """cluster { tls { ... verify: true } }: routes are TLS with certificates checked both
    ways; a server whose certificate another CA signed never joins."""
    ca, rogue = trustme.CA(), trustme.CA()
    files: dict[str, str] = {}
    for name, issuer in (("good", ca), ("bad", rogue)):
        cert = issuer.issue_cert("127.0.0.1", "localhost")
        files[f"{name}.pem"] = str(tmp_path / f"{name}.pem")
        files[f"{name}.key"] = str(tmp_path / f"{name}.key")
        cert.cert_chain_pems[0].write_to_path(files[f"{name}.pem"])
        cert.private_key_pem.write_to_path(files[f"{name}.key"])
    ca_file = str(tmp_path / "ca.pem")
    ca.cert_pem.write_to_path(ca_file)
    cl = make_cluster(3, jetstream=lambda i: False)
    for node in cl.nodes:
        kind = "bad" if node.index == 3 else "good"
        node.cluster_extra = (
            f'  tls {{ cert_file: "{files[kind + ".pem"]}", key_file: "{files[kind + ".key"]}",'
            f' ca_file: "{ca_file}", verify: true }}\n'
        )
    await cl.start(wait=False)
    n1, n2, n3 = cl.nodes
    for node in cl.nodes:
        await cl.wait_serving(node)
    await cl.wait_mesh(nodes=[n1, n2])
    a, b = await cl.connect(n1), await cl.connect(n2)

    async def echo(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(msg.data)

    await b.subscribe("tls.echo", cb=echo)
    await b.flush()
    assert (await wait_until(lambda: a.request("tls.echo", b"x", timeout=0.5))).data == b"x"
    for _ in range(10):  # bounded negative wait: the rogue server stays out
        assert n3.http("/routez")["num_routes"] == 0
        await asyncio.sleep(0.1)
    await a.close()
    await b.close()
