"""JetStream through account imports, with nats-py, beside a real nats-server: account A
exports its JetStream API (``$JS.API.>``, Stream responses), its stream subjects, its acks
and a push consumer's deliver subject; account B's client uses A's JetStream through the
prefix ``JS.A.API`` (``nc.jetstream(prefix=...)``): create, publish, info, pull with acks,
and a push consumer delivering into B."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import nats
import pytest

from jetraft.config import parse_config
from jetraft.server.server import Server
from tests.integration.conftest import wait_for
from tests.integration.jetstream.consumer_support import _free_port, _wait_port, nats_server_binary

pytestmark = pytest.mark.skipif(
    not Path(nats_server_binary()).exists(), reason="nats-server binary not installed"
)

ACCOUNTS = """
accounts {
  A {
    jetstream: enabled
    users [{user: a, password: a}]
    exports [
      {service: "$JS.API.>", response_type: stream}
      {service: "orders.>"}
      {service: "$JS.ACK.>"}
      {stream: "deliver.>"}
    ]
  }
  B {
    users [{user: b, password: b}]
    imports [
      {service: {account: A, subject: "$JS.API.>"}, to: "JS.A.API.>"}
      {service: {account: A, subject: "orders.>"}}
      {service: {account: A, subject: "$JS.ACK.>"}}
      {stream: {account: A, subject: "deliver.>"}}
    ]
  }
}
"""


async def _scenario(port: int) -> list[Any]:
    a = await nats.connect(f"nats://a:a@127.0.0.1:{port}", allow_reconnect=False)
    b = await nats.connect(f"nats://b:b@127.0.0.1:{port}", allow_reconnect=False)
    out: list[Any] = []
    try:
        js = b.jetstream(prefix="JS.A.API")
        si = await js.add_stream(name="ORD", subjects=["orders.>"])
        out.append(("created", si.config.name, si.config.subjects))
        ack = await js.publish("orders.1", b"one")
        out.append(("puback", ack.stream, ack.seq))
        await b.publish("orders.2", b"two")
        await b.flush()
        info = await js.stream_info("ORD")
        out.append(("stored", info.state.messages))
        psub = await js.pull_subscribe("orders.>", durable="D", stream="ORD")
        msgs = await psub.fetch(2, timeout=5)
        # Stored without the Nats-Request-Info header the import added to the publishes.
        out.append(("fetched", [(m.subject, m.data, m.metadata.sequence.stream, m.headers)
                                for m in msgs]))
        for m in msgs:
            await m.ack()
        await b.flush()

        async def acked() -> bool:
            ci = await js.consumer_info("ORD", "D")
            return ci.ack_floor.consumer_seq == 2 and ci.num_ack_pending == 0

        floor = False
        for _ in range(200):  # until the acks, which went through an import, are applied
            floor = await acked()
            if floor:
                break
        out.append(("acked", floor))
        got: list[tuple[str, bytes]] = []

        async def on_push(m: Any) -> None:
            got.append((m.subject, m.data))

        await b.subscribe("deliver.x", cb=on_push)
        await b.flush()
        await a.jetstream().add_consumer(
            "ORD", durable_name="P", deliver_subject="deliver.x", ack_policy="none"
        )
        await wait_for(lambda: len(got) == 2, what="push deliveries through a stream import")
        out.append(("pushed", got))
    finally:
        await a.close()
        await b.close()
    return out


async def test_jetstream_through_imports_as_nats_server(tmp_path: Path) -> None:
    port = _free_port()
    conf = tmp_path / "js.conf"
    conf.write_text(f'listen: 127.0.0.1:{port}\njetstream {{ store_dir: "{tmp_path / "n"}" }}\n'
                    f"{ACCOUNTS}")
    proc = subprocess.Popen([nats_server_binary(), "-c", str(conf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await _wait_port(port)
        theirs = await _scenario(port)
    finally:
        proc.terminate()
        proc.wait(10)
    server = Server(parse_config(
        f'listen: 127.0.0.1:-1\njetstream {{ store_dir: "{tmp_path / "j"}" }}\n{ACCOUNTS}'
    ))
    await server.start()
    try:
        ours = await _scenario(server.client_port)
    finally:
        await server.stop()
    assert ours == theirs
    assert ours == [
        ("created", "ORD", ["orders.>"]),
        ("puback", "ORD", 1),
        ("stored", 2),
        ("fetched", [("orders.1", b"one", 1, None), ("orders.2", b"two", 2, None)]),
        ("acked", True),
        ("pushed", [("orders.1", b"one"), ("orders.2", b"two")]),
    ]
