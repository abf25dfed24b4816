"""$SYS.REQ.SERVER requests, as `nats server ls`, `nats server report jetstream` and `nats
server request` send them: one server, a three-server cluster, and side by side with the real
nats-server for the shapes of the answers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest

from jetraft.server.server import Server
from tests.cluster.conftest import ClusterFactory, make_cluster  # noqa: F401 (fixture)
from tests.cluster.harness import SYS_HASH, SYS_PASSWORD, SYS_USER, wait_until
from tests.integration.conftest import ServerFactory, connect, url
from tests.integration.jetstream.consumer_support import nats_server_binary
from tests.ports import free_port as _free_port

pytestmark = pytest.mark.timeout(180)

KINDS = ("STATSZ", "VARZ", "CONNZ", "SUBSZ", "ROUTEZ", "JSZ", "HEALTHZ", "IDZ", "ACCOUNTZ")
SERVER_INFO_KEYS = {"name", "host", "id", "ver", "jetstream", "flags", "seq", "time"}
STATSZ_KEYS = {
    "start", "mem", "cores", "cpu", "connections", "total_connections", "active_accounts",
    "subscriptions", "sent", "received", "slow_consumers", "active_servers",
}


def config_text(store: Path) -> str:
    """The seeds' $SYS account and bcrypt user, an application account, JetStream with a
    domain, and server tags (both servers read it the same way)."""
    return (
        "server_name: sys-test\n"
        'server_tags: ["az:1", "ssd"]\n'
        f'jetstream {{ store_dir: "{store}", domain: hub }}\n'
        "accounts {\n"
        f'  $SYS {{ users = [ {{ user: "{SYS_USER}", pass: "{SYS_HASH}" }} ] }}\n'
        '  APP { jetstream: enabled, users = [ { user: "app", password: "app" } ] }\n'
        "}\n"
    )


async def collect(
    nc: nats.NATS, subject: str, body: bytes = b"", want: int = 1, quiet_s: float = 0.2
) -> list[dict[str, Any]]:
    """Publish one request and gather every answer: wait for ``want`` of them (up to 10 s),
    then a bounded quiet period in which no further answer may come unnoticed."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(subject, body, reply=inbox)
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while True:
        wait = quiet_s if len(out) >= want else max(deadline - time.monotonic(), 0.01)
        try:
            msg = await sub.next_msg(timeout=wait)
        except nats.errors.TimeoutError:
            break
        out.append(json.loads(msg.data))
    await sub.unsubscribe()
    return out


async def sys_connect(server_url: str) -> nats.NATS:
    return await nats.connect(
        server_url, user=SYS_USER, password=SYS_PASSWORD, allow_reconnect=False,
        connect_timeout=5,
    )


@pytest.fixture
async def single(make_server: ServerFactory, tmp_path: Path) -> Server:
    return await make_server(config_text(tmp_path / "js"), http=True)


@pytest.fixture
async def sysnc(single: Server) -> AsyncIterator[nats.NATS]:
    nc = await sys_connect(url(single))
    yield nc
    await nc.close()


# --- one server ---------------------------------------------------------------------------


async def test_ping_answers_statsz_with_the_server_envelope(
    single: Server, sysnc: nats.NATS
) -> None:
    (reply,) = await collect(sysnc, "$SYS.REQ.SERVER.PING")
    info, statsz = reply["server"], reply["statsz"]
    assert set(info) >= SERVER_INFO_KEYS
    assert (info["name"], info["id"], info["host"]) == ("sys-test", single.server_id, "127.0.0.1")
    assert info["ver"] == single.info_version() and info["jetstream"] is True
    assert info["flags"] & 1 and info["domain"] == "hub" and info["tags"] == ["az:1", "ssd"]
    assert set(statsz) >= STATSZ_KEYS
    assert statsz["active_servers"] == 1 and statsz["connections"] == 1
    assert statsz["jetstream"]["stats"]["api"]["level"] >= 1
    # seq grows with every answer: clients use it to spot stale or reordered updates.
    (again,) = await collect(sysnc, "$SYS.REQ.SERVER.PING.STATSZ")
    assert again["server"]["seq"] > info["seq"]


async def test_every_kind_by_ping_and_by_server_id(single: Server, sysnc: nats.NATS) -> None:
    for kind in KINDS:
        by_ping = await collect(sysnc, f"$SYS.REQ.SERVER.PING.{kind}")
        by_id = await collect(sysnc, f"$SYS.REQ.SERVER.{single.server_id}.{kind}")
        assert len(by_ping) == len(by_id) == 1, kind
        if kind == "IDZ":  # the bare identity, no envelope (as nats-server)
            assert by_id[0] == {"name": "sys-test", "host": "127.0.0.1", "id": single.server_id}
            continue
        reply = by_id[0]
        assert reply["server"]["id"] == single.server_id, kind
        assert ("statsz" if kind == "STATSZ" else "data") in reply, kind
    # The data is what the HTTP endpoint serves.
    (varz,) = await collect(sysnc, "$SYS.REQ.SERVER.PING.VARZ")
    assert varz["data"]["server_id"] == single.server_id and varz["data"]["connections"] == 1
    assert varz["data"]["go"].startswith("jetraft ")
    (connz,) = await collect(sysnc, "$SYS.REQ.SERVER.PING.CONNZ", b'{"subscriptions":true}')
    (conn,) = connz["data"]["connections"]
    assert conn["account"] == "$SYS" and conn["subscriptions_list"]
    (health,) = await collect(sysnc, "$SYS.REQ.SERVER.PING.HEALTHZ")
    assert health["data"] == {"status": "ok", "status_code": 200}
    (acc,) = await collect(sysnc, "$SYS.REQ.SERVER.PING.ACCOUNTZ", b'{"account":"APP"}')
    assert acc["data"]["account_detail"]["jetstream_enabled"] is True
    assert acc["data"]["system_account"] == "$SYS"


async def test_jsz_options_travel_in_the_body(single: Server, sysnc: nats.NATS) -> None:
    app = await connect(single, user="app", password="app")
    await app.jetstream().add_stream(name="ORDERS", subjects=["orders.>"])
    await app.jetstream().publish("orders.1", b"x")
    (plain,) = await collect(sysnc, "$SYS.REQ.SERVER.PING.JSZ")
    assert plain["data"]["streams"] == 1 and "account_details" not in plain["data"]
    (detail,) = await collect(
        sysnc, "$SYS.REQ.SERVER.PING.JSZ", b'{"accounts":true,"streams":true}'
    )
    (account,) = detail["data"]["account_details"]
    assert account["name"] == "APP"
    assert [s["name"] for s in account["stream_detail"]] == ["ORDERS"]
    assert account["stream_detail"][0]["state"]["messages"] == 1
    await app.close()


async def test_go_clients_zero_values_mean_not_given(sysnc: nats.NATS) -> None:
    """The nats CLI marshals every option, unset ones as Go zero values ("" / 0 / false /
    null): they must read as absent, not as sort "" or limit 0."""
    body = json.dumps({
        "sort": "", "auth": True, "subscriptions": False, "subscriptions_detail": False,
        "offset": 0, "limit": 0, "cid": 0, "mqtt_client": "", "state": 0, "user": "",
        "acc": "", "filter_subject": "", "server_name": "", "cluster": "", "host": "",
        "tags": None, "domain": "",
    }).encode()
    (reply,) = await collect(sysnc, "$SYS.REQ.SERVER.PING.CONNZ", body)
    assert "error" not in reply and reply["data"]["limit"] == 1024
    (conn,) = reply["data"]["connections"]
    (mine,) = (await collect(sysnc, "$SYS.REQ.SERVER.PING.CONNZ", b'{"acc":"$SYS"}'))[0][
        "data"]["connections"]
    assert mine["cid"] == conn["cid"]
    (other,) = await collect(sysnc, "$SYS.REQ.SERVER.PING.CONNZ", b'{"acc":"APP"}')
    assert other["data"]["connections"] == []
    by_cid = json.dumps({"cid": conn["cid"], "state": 0}).encode()
    (again,) = await collect(sysnc, "$SYS.REQ.SERVER.PING.CONNZ", by_cid)
    assert [c["cid"] for c in again["data"]["connections"]] == [conn["cid"]]


async def test_filters_select_the_servers_that_answer(sysnc: nats.NATS) -> None:
    answered = [
        b'{"server_name":"sys"}',  # substring
        b'{"server_name":"sys-test","exact_match":true}',
        b'{"host":"127.0"}',
        b'{"tags":["SSD","az:1"]}',  # every tag, any case
        b'{"domain":"hub"}',
    ]
    silent = [
        b'{"server_name":"other"}',
        b'{"server_name":"sys","exact_match":true}',
        b'{"cluster":"C1"}',  # a lone server is in no cluster
        b'{"tags":["ssd","hdd"]}',
        b'{"domain":"leaf"}',
    ]
    for body in answered:
        assert len(await collect(sysnc, "$SYS.REQ.SERVER.PING.VARZ", body)) == 1, body
        assert len(await collect(sysnc, "$SYS.REQ.SERVER.PING", body)) == 1, body
    for body in silent:
        for subject in ("$SYS.REQ.SERVER.PING.VARZ", "$SYS.REQ.SERVER.PING"):
            assert await collect(sysnc, subject, body, want=0, quiet_s=0.3) == [], body


async def test_bad_bodies_and_unknown_kinds(single: Server, sysnc: nats.NATS) -> None:
    for body in (b"garbage", b"[1]", b'{"limit":"ten"}'):
        (reply,) = await collect(sysnc, "$SYS.REQ.SERVER.PING.CONNZ", body)
        assert reply["error"]["code"] == 400 and "data" not in reply, body
        assert reply["server"]["id"] == single.server_id
    (reply,) = await collect(sysnc, "$SYS.REQ.SERVER.PING.ACCOUNTZ", b'{"account":"NOPE"}')
    assert reply["error"] == {"code": 500, "description": "Account NOPE does not exist"}
    for subject in ("$SYS.REQ.SERVER.PING.FOO", f"$SYS.REQ.SERVER.{single.server_id}.KICKZ"):
        with pytest.raises(nats.errors.NoRespondersError):
            await sysnc.request(subject, b"", timeout=2)
    # The server is still there for everyone.
    assert len(await collect(sysnc, "$SYS.REQ.SERVER.PING")) == 1


async def test_a_normal_account_cannot_reach_server_requests(
    single: Server, sysnc: nats.NATS
) -> None:
    app = await connect(single, user="app", password="app")
    for subject in ("$SYS.REQ.SERVER.PING", "$SYS.REQ.SERVER.PING.VARZ",
                    f"$SYS.REQ.SERVER.{single.server_id}.JSZ"):
        with pytest.raises(nats.errors.NoRespondersError):
            await app.request(subject, b"", timeout=2)
    # A subscription in another account is another subject space: it never sees the
    # system account's requests, nor answers them.
    spy = await app.subscribe("$SYS.REQ.>")
    await app.flush()
    assert len(await collect(sysnc, "$SYS.REQ.SERVER.PING")) == 1
    with pytest.raises(nats.errors.TimeoutError):
        await spy.next_msg(timeout=0.3)
    await app.close()


async def test_the_system_account_exists_unless_disabled(make_server: ServerFactory) -> None:
    import urllib.request

    def accountz(server: Server) -> dict[str, Any]:
        assert server.monitor is not None
        with urllib.request.urlopen(f"http://127.0.0.1:{server.monitor.port}/accountz") as r:
            body: dict[str, Any] = json.loads(r.read())
            return body

    plain = await make_server("", http=True)
    got = await asyncio.to_thread(accountz, plain)
    assert got["system_account"] == "$SYS" and got["accounts"] == ["$G", "$SYS"]
    off = await make_server("no_system_account: true\n", http=True)
    got = await asyncio.to_thread(accountz, off)
    assert "system_account" not in got and got["accounts"] == ["$G"]


async def test_healthz_js_options_over_http(make_server: ServerFactory, tmp_path: Path) -> None:
    """``js-enabled-only`` and ``js-server-only`` answer without looking at the assets; the
    full check reports a stream that could not be recovered, as nats-server."""
    import urllib.error
    import urllib.request

    conf = config_text(tmp_path / "js")
    server = await make_server(conf)
    app = await connect(server, user="app", password="app")
    await app.jetstream().add_stream(name="BROKEN", subjects=["broken"])
    await app.close()
    await server.stop()
    meta = tmp_path / "js" / "jetstream" / "APP" / "streams" / "BROKEN" / "meta.json"
    meta.write_text(meta.read_text().replace('"broken"', '"edited"'))  # checksum mismatch
    server = await make_server(conf, http=True)
    assert server.monitor is not None
    port = server.monitor.port

    def get(path: str) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}") as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    status, body = await asyncio.to_thread(get, "/healthz")
    assert status == 503 and body["status"] == "unavailable"
    assert body["error"].startswith("JetStream stream 'APP > BROKEN' could not be recovered")
    for only in ("js-enabled-only=true", "js-server-only=true"):
        assert await asyncio.to_thread(get, f"/healthz?{only}") == (200, {"status": "ok"})
    status, body = await asyncio.to_thread(get, "/healthz?details=true")
    assert status == 503 and body["status"] == "error"
    assert body["errors"][0]["type"] == "STREAM" and body["errors"][0]["stream"] == "BROKEN"
    status, body = await asyncio.to_thread(get, "/healthz?stream=X")
    assert status == 400
    assert body["error"] == '"account" must not be empty when checking stream health'
    status, body = await asyncio.to_thread(get, "/healthz?account=APP&stream=NOPE")
    assert status == 404 and "not found" in body["error"]
    # The same check as a system request keeps the status code in the body.
    nc = await sys_connect(url(server))
    (reply,) = await collect(nc, "$SYS.REQ.SERVER.PING.HEALTHZ")
    assert reply["data"]["status_code"] == 503 and "BROKEN" in reply["data"]["error"]
    (reply,) = await collect(nc, "$SYS.REQ.SERVER.PING.HEALTHZ", b'{"js-enabled-only":true}')
    assert reply["data"] == {"status": "ok", "status_code": 200}
    await nc.close()


# --- the same requests against nats-server -------------------------------------------------


async def _answers(server_url: str) -> dict[str, dict[str, Any]]:
    nc = await sys_connect(server_url)
    out = {}
    for kind in KINDS:
        body = b'{"accounts":true}' if kind == "JSZ" else b""
        (out[kind],) = await collect(nc, f"$SYS.REQ.SERVER.PING.{kind}", body)
    await nc.close()
    return out


async def test_answers_have_nats_servers_shape(single: Server, tmp_path: Path) -> None:
    """Every key jetraft sends is one nats-server sends in the same place, and the keys
    the CLI reads are there in both."""
    port = _free_port()
    conf = tmp_path / "nats.conf"
    conf.write_text(f"listen: 127.0.0.1:{port}\n" + config_text(tmp_path / "nats-js"))
    proc = subprocess.Popen([nats_server_binary(), "-c", str(conf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                break
            assert time.monotonic() < deadline, "nats-server did not start"
            await asyncio.sleep(0.05)
        theirs = await _answers(f"nats://127.0.0.1:{port}")
    finally:
        proc.terminate()
        proc.wait(10)
    ours = await _answers(url(single))
    for kind in KINDS:
        a, b = ours[kind], theirs[kind]
        assert set(a) == set(b), kind
        for part in ("server", "statsz", "data"):
            if isinstance(a.get(part), dict):
                assert set(a[part]) <= set(b[part]), (kind, part, set(a[part]) - set(b[part]))
        if "server" in a:
            assert SERVER_INFO_KEYS | {"domain", "tags"} <= set(a["server"]) & set(b["server"])
    assert set(ours["STATSZ"]["statsz"]) & set(theirs["STATSZ"]["statsz"]) >= STATSZ_KEYS


# --- a cluster -----------------------------------------------------------------------------


async def test_cluster_every_server_answers_a_ping(
    make_cluster: ClusterFactory,  # noqa: F811 (the fixture imported above)
) -> None:
    cl = make_cluster(3, jetstream=lambda i: True)
    await cl.start()
    leader = await cl.wait_jetstream()
    n1, n2, n3 = cl.nodes
    nc = await nats.connect(n1.sys_url, allow_reconnect=False)  # the harness URL works
    names = {n.name for n in cl.nodes}
    # The system account's interest crosses the routes: every server answers (once the
    # routes have carried the interest, which may trail the routes themselves a little).

    async def all_three() -> list[dict[str, Any]] | None:
        got = await collect(nc, "$SYS.REQ.SERVER.PING", want=3, quiet_s=0.3)
        return got if len(got) >= 3 else None

    statsz = await wait_until(all_three, 20, "a statsz answer from every server")
    assert {r["server"]["name"] for r in statsz} == names and len(statsz) == 3
    for r in statsz:
        assert r["server"]["cluster"] == "C1" and r["statsz"]["active_servers"] == 3
        assert len(r["statsz"]["routes"]) == 2
    jsz = await collect(nc, "$SYS.REQ.SERVER.PING.JSZ", b'{"raft":true}', want=3)
    assert {r["server"]["name"] for r in jsz} == names
    assert {r["data"]["meta_cluster"]["leader"] for r in jsz} == {leader}
    # One server by id, asked through another.
    id3 = next(r["server"]["id"] for r in statsz if r["server"]["name"] == n3.name)
    (varz,) = await collect(nc, f"$SYS.REQ.SERVER.{id3}.VARZ")
    assert varz["server"]["name"] == n3.name and varz["data"]["server_name"] == n3.name
    # Filters pick servers across the cluster.
    only = await collect(nc, "$SYS.REQ.SERVER.PING.HEALTHZ",
                         json.dumps({"server_name": n2.name}).encode(), quiet_s=0.5)
    assert [r["server"]["name"] for r in only] == [n2.name]
    assert only[0]["data"]["status"] == "ok"  # the meta group has a leader
    exact = await collect(nc, "$SYS.REQ.SERVER.PING", b'{"cluster":"C1","exact_match":true}',
                          want=3)
    assert len(exact) == 3
    assert await collect(nc, "$SYS.REQ.SERVER.PING", b'{"cluster":"C2"}', want=0, quiet_s=0.5) == []
    # A normal account on another server still cannot reach them.
    app = await cl.connect(n2)
    with pytest.raises(nats.errors.NoRespondersError):
        await app.request("$SYS.REQ.SERVER.PING", b"", timeout=2)
    await app.close()
    await nc.close()
