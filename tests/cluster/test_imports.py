"""Account imports in a cluster: every server forwards the messages that entered at it, and
only those; a service import's responses find the requester on another server."""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable

import nats.errors
import pytest

from tests.cluster.conftest import ClusterFactory
from tests.cluster.harness import wait_until
from tests.integration.jetstream.test_js_imports import ACCOUNTS as JS_IMPORTS

pytestmark = pytest.mark.timeout(180)

ACCOUNTS = """
accounts {
  $SYS { users [{user: sys, password: sys}] }
  A {
    users [{user: a, password: a}]
    exports [{stream: "a.>"}, {service: "svc.>"}, {service: "many", response_type: stream}]
  }
  B {
    users [{user: b, password: b}]
    imports [
      {stream: {account: A, subject: "a.>"}, prefix: "p"}
      {service: {account: A, subject: "svc.>"}, to: "local.svc.>"}
      {service: {account: A, subject: "many"}}
    ]
  }
}
"""


async def test_imports_across_three_servers(make_cluster: ClusterFactory) -> None:
    cl = make_cluster(3, jetstream=lambda i: False, extra=lambda i: ACCOUNTS)
    await cl.start()
    n1, n2, n3 = cl.nodes
    a1 = await cl.connect(n1, user="a", password="a")  # publisher and responder in A
    b2 = await cl.connect(n2, user="b", password="b")  # requester in B
    b3 = await cl.connect(n3, user="b", password="b")  # stream-import subscriber in B
    a3 = await cl.connect(n3, user="a", password="a")  # a subscriber of A's own on n3
    got: dict[str, list[str]] = collections.defaultdict(list)

    def collector(name: str) -> Callable[[nats.aio.msg.Msg], Awaitable[None]]:
        async def cb(msg: nats.aio.msg.Msg) -> None:
            got[name].append(msg.subject)

        return cb

    await b3.subscribe("p.>", cb=collector("b3"))
    await a3.subscribe("a.>", cb=collector("a3"))
    await b2.subscribe("p.>", cb=collector("b2"))

    async def svc(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(b"from n1:" + msg.subject.encode())

    async def many(msg: nats.aio.msg.Msg) -> None:
        for i in range(3):
            await a1.publish(msg.reply, b"part%d" % i)

    await a1.subscribe("svc.>", cb=svc)
    await a1.subscribe("many", cb=many)
    await a1.flush()

    # Interest travels over the routes: probe until the subscribers on n2 and n3 hear n1.
    async def heard() -> bool:
        await a1.publish("a.probe", b"")
        await a1.flush()
        return bool(got["b3"]) and bool(got["a3"]) and bool(got["b2"])

    await wait_until(heard, 20, "stream import interest on n2 and n3")
    reply = await wait_until(lambda: b2.request("local.svc.ping", b"x", timeout=1),
                             20, "service import across servers")
    assert reply.data == b"from n1:svc.ping"

    # Exactly once: each subscriber gets every message once, the marker last (messages from
    # n1 to n3 travel one route in order, so whatever was coming came before it).
    got.clear()
    for i in range(20):
        await a1.publish(f"a.{i}", b"")
    await a1.publish("a.end", b"")
    await a1.flush()
    for name in ("b2", "b3", "a3"):
        await wait_until(lambda name=name: got[name] and got[name][-1].endswith("a.end"),
                         20, f"the marker at {name}")
    want = [f"a.{i}" for i in range(20)] + ["a.end"]
    assert got["a3"] == want
    assert got["b3"] == got["b2"] == ["p." + s for s in want]

    # A stream of responses from n1 reaches the requester on n2.
    parts: list[bytes] = []
    inbox = b2.new_inbox()

    async def collect(msg: nats.aio.msg.Msg) -> None:
        parts.append(msg.data)

    await b2.subscribe(inbox, cb=collect)
    await b2.publish("many", b"", reply=inbox)
    await wait_until(lambda: len(parts) == 3, 20, "three responses")
    assert parts == [b"part0", b"part1", b"part2"]

    # Nobody in A serves: the requester on n2 hears so at once.
    with pytest.raises(nats.errors.NoRespondersError):
        await b2.request("local.nobody", b"", timeout=5)

    for nc in (a1, b2, b3, a3):
        await nc.close()


JS_ACCOUNTS = JS_IMPORTS.replace(
    "accounts {", "accounts {\n  $SYS { users [{user: sys, password: sys}] }", 1
)


async def test_jetstream_through_imports_on_every_server(make_cluster: ClusterFactory) -> None:
    """Account B uses A's JetStream through imports from each server of a JetStream cluster:
    the API answers, PubAcks and pull deliveries (shown with the stored subject, routed by
    the mapped reply) find the requester wherever the stream's and consumer's leaders are."""
    cl = make_cluster(3, extra=lambda i: JS_ACCOUNTS)
    await cl.start()
    await cl.wait_jetstream()
    got = []
    for node in cl.nodes:
        b = await cl.connect(node, user="b", password="b")
        try:
            js = b.jetstream(prefix="JS.A.API")
            name = node.name.replace("-", "_")
            await wait_until(lambda js=js, name=name: js.add_stream(
                name=name, subjects=[f"orders.{name}.>"], num_replicas=3), 30, "stream create")
            ack = await js.publish(f"orders.{name}.x", b"1")
            psub = await js.pull_subscribe(f"orders.{name}.>", durable="D", stream=name)
            msgs = await psub.fetch(1, timeout=10)
            await msgs[0].ack_sync()
            got.append((ack.seq, [(m.subject, m.data) for m in msgs]))
        finally:
            await b.close()
    assert got == [(1, [(f"orders.{n.name.replace('-', '_')}.x", b"1")]) for n in cl.nodes]
