"""Account subject mappings (``mappings {}``) through nats-py: a publish is routed to the
mapped subject (weighted destinations split the traffic), per account, before permissions
are checked, and into JetStream streams; a bad mapping stops the server at its place."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import nats
import nats.errors
import pytest

from .conftest import ServerFactory, connect

CONF = """
mappings {
  "orders.*.*": "ord.$2.{{partition(3,1)}}.$1"
  "split": [{destination: "split.a", weight: 25%}, {destination: "split.b", weight: 25%}]
  "drop": [{destination: "drop", weight: 0}, {destination: "drop.kept", weight: 50}]
}
"""


async def test_mapped_publishes_reach_the_destination(make_server: ServerFactory) -> None:
    server = await make_server(CONF)
    nc = await connect(server)
    sub = await nc.subscribe("ord.>")
    raw = await nc.subscribe("orders.>")
    await nc.flush()
    await nc.publish("orders.eu.42", b"x")
    msg = await sub.next_msg(timeout=2)
    assert msg.subject == "ord.42.2.eu"  # partition(3) of "eu": FNV-1a as nats-server
    with pytest.raises(nats.errors.TimeoutError):
        await raw.next_msg(timeout=0.2)  # nothing on the published subject
    # Requests are mapped too: the responder sees the mapped subject.
    async def answer(m: nats.aio.msg.Msg) -> None:
        await m.respond(m.subject.encode())

    await nc.subscribe("ord.7.*.us", cb=answer)
    reply = await nc.request("orders.us.7", b"", timeout=2)
    assert reply.data.decode().startswith("ord.7.")
    await nc.close()


async def test_weights_split_and_drop(make_server: ServerFactory) -> None:
    server = await make_server(CONF)
    nc = await connect(server)
    got: Counter[str] = Counter()
    subs = [await nc.subscribe(s) for s in ("split", "split.a", "split.b", "drop", "drop.kept")]
    await nc.flush()
    for _ in range(400):
        await nc.publish("split", b"")
        await nc.publish("drop", b"")
    await nc.flush()
    for sub in subs:
        while True:
            try:
                msg = await sub.next_msg(timeout=0.3)
            except nats.errors.TimeoutError:
                break
            got[msg.subject] += 1
    assert got["split"] + got["split.a"] + got["split.b"] == 400
    assert all(60 < got[s] < 140 for s in ("split.a", "split.b")) and got["split"] > 120
    # "drop" listed at weight 0: half goes to drop.kept, the other half is dropped.
    assert got["drop"] == 0 and 140 < got["drop.kept"] < 260
    await nc.close()


async def test_account_mappings_and_permissions(make_server: ServerFactory) -> None:
    server = await make_server("""
accounts {
  A {
    users [{user: a, password: a, permissions: {publish: ["to.>", "_INBOX.>"]}}]
    mappings { "from.*": "to.$1", "secret": "hidden" }
  }
  B { users [{user: b, password: b}] }
}
""")
    a = await connect(server, user="a", password="a")
    b = await connect(server, user="b", password="b")
    sub_a = await a.subscribe("to.>")
    sub_b = await b.subscribe(">")
    await a.flush()
    await b.flush()
    await a.publish("from.x", b"1")  # allowed: the mapped subject is checked
    assert (await sub_a.next_msg(timeout=2)).subject == "to.x"
    await b.publish("from.y", b"2")  # B has no mappings
    assert (await sub_b.next_msg(timeout=2)).subject == "from.y"
    with pytest.raises(nats.errors.TimeoutError):
        await sub_b.next_msg(timeout=0.2)  # A's traffic stays in A
    await a.close()
    await b.close()


async def test_mapped_subject_lands_in_a_stream(make_server: ServerFactory, tmp_path: Path) -> None:
    server = await make_server(
        'mappings { "in.*": "stored.$1" }\n'
        f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\n')
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="MAPPED", subjects=["stored.*"])
    ack = await js.publish("in.q", b"v")
    assert (ack.stream, ack.seq) == ("MAPPED", 1)
    assert (await js.get_msg("MAPPED", 1)).subject == "stored.q"
    await nc.close()


def test_bad_mapping_stops_the_server_at_its_line(tmp_path: Path) -> None:
    conf = tmp_path / "map.conf"
    conf.write_text('listen: 127.0.0.1:-1\nmappings {\n  "a.*": "b.$3"\n}\n')
    for args in (["-t", "-c", str(conf)], ["-c", str(conf)]):
        proc = subprocess.run([sys.executable, "-m", "jetraft", "server", *args],
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 1
        assert f"{conf}:3:" in proc.stderr
        assert ('Error adding mapping for "a.*" to "b.$3" : invalid mapping destination: '
                "wildcard index out of range in $3: [3]") in proc.stderr
