"""TLS client connections and the monitoring endpoints."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme

from jetraft.server.server import Server
from tests.ports import free_port

from .conftest import ServerFactory, connect, wait_for


@pytest.fixture
def certs(tmp_path: Path) -> dict[str, Any]:
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    client_cert = ca.issue_cert("client@example.com")
    paths = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "s.pem", "key": tmp_path / "s.key"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server_cert.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    server_cert.private_key_pem.write_to_path(str(paths["key"]))
    return {"ca": ca, "client": client_cert, **{k: str(v) for k, v in paths.items()}}


async def test_tls_required(make_server: ServerFactory, certs: dict[str, Any]) -> None:
    server = await make_server(
        f'tls {{ cert_file: "{certs["cert"]}", key_file: "{certs["key"]}" }}'
    )
    ctx = ssl.create_default_context(cafile=certs["ca"])
    nc = await connect(server, tls=ctx)
    sub = await nc.subscribe("secure")
    await nc.publish("secure", b"over tls")
    assert (await sub.next_msg(timeout=2)).data == b"over tls"
    await nc.close()
    # A client without our CA: nats-py upgrades because INFO says tls_required, and the
    # handshake fails on the unknown issuer.
    with pytest.raises(ssl.SSLError):
        await connect(server)


async def test_tls_handshake_first(make_server: ServerFactory, certs: dict[str, Any]) -> None:
    server = await make_server(
        f'tls {{ cert_file: "{certs["cert"]}", key_file: "{certs["key"]}",'
        " handshake_first: true }"
    )
    ctx = ssl.create_default_context(cafile=certs["ca"])
    nc = await connect(server, tls=ctx, tls_handshake_first=True)
    sub = await nc.subscribe("hf")
    await nc.publish("hf", b"first")
    assert (await sub.next_msg(timeout=2)).data == b"first"
    await nc.close()


async def test_tls_verify_needs_client_cert(
    make_server: ServerFactory, certs: dict[str, Any]
) -> None:
    server = await make_server(
        f'tls {{ cert_file: "{certs["cert"]}", key_file: "{certs["key"]}",'
        f' ca_file: "{certs["ca"]}", verify: true }}'
    )
    ctx = ssl.create_default_context(cafile=certs["ca"])
    certs["client"].configure_cert(ctx)
    nc = await connect(server, tls=ctx)
    assert nc.is_connected
    await nc.close()
    bare = ssl.create_default_context(cafile=certs["ca"])
    try:
        rejected = await connect(server, tls=bare)
    except Exception:
        pass
    else:
        # With TLS 1.3 the client finishes its handshake before the server has checked the
        # client's certificate; the server's refusal then arrives as a closed connection.
        await wait_for(lambda: rejected.is_closed, what="server to drop the certless client")
    assert not any(c.connected for c in server.clients.values())


async def _http_get(port: int, path: str) -> tuple[int, Any]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    raw = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def test_monitoring_endpoints(make_server: ServerFactory) -> None:
    server: Server = await make_server(http=True)
    assert server.monitor is not None
    port = server.monitor.port
    # The server's own subscriptions (system requests) count too, as in nats-server.
    _, before = await _http_get(port, "/varz")
    base_subs = before["subscriptions"]
    nc = await connect(server, name="watcher")
    sub = await nc.subscribe("m.>")
    for _i in range(10):
        await nc.publish("m.x", b"12345")
    await nc.flush()
    for _ in range(10):
        await sub.next_msg(timeout=2)

    status, health = await _http_get(port, "/healthz")
    assert (status, health) == (200, {"status": "ok"})

    status, varz = await _http_get(port, "/varz")
    assert status == 200
    assert varz["server_id"] == server.server_id
    assert varz["connections"] == 1
    assert varz["in_msgs"] == 10 and varz["in_bytes"] == 50
    assert varz["out_msgs"] == 10 and varz["out_bytes"] == 50
    assert varz["subscriptions"] == base_subs + 1
    assert varz["mem"] > 0 and "cpu" in varz and varz["uptime"].endswith("s")

    status, connz = await _http_get(port, "/connz?subs=1")
    assert status == 200 and connz["num_connections"] == 1
    conn = connz["connections"][0]
    assert conn["name"] == "watcher" and conn["lang"] == "python3"
    assert conn["in_msgs"] == 10 and conn["out_msgs"] == 10
    assert conn["subscriptions_list"] == ["m.>"]

    status, subsz = await _http_get(port, "/subsz")
    assert status == 200 and subsz["num_subscriptions"] == base_subs + 1

    await nc.close()
    await wait_for(lambda: len(server.monitoring.closed) == 1, what="closed connection record")
    status, connz = await _http_get(port, "/connz?state=closed")
    assert connz["total"] == 1 and connz["connections"][0]["name"] == "watcher"
    status, _ = await _http_get(port, "/nope")
    assert status == 404
    status, _ = await _http_get(port, "/connz?sort=bogus")
    assert status == 400


def _tls_client_answering_info_at_once(port: int, ca_file: str) -> bytes:
    """A client whose TLS hello is ready before it connects and leaves the moment INFO does:
    the fastest a client can be. Returns what the server says to CONNECT + PING."""
    import socket

    ctx = ssl.create_default_context(cafile=ca_file)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")

    def step() -> bool:
        try:
            tls.do_handshake()
            return True
        except ssl.SSLWantReadError:
            return False

    step()
    hello = outgoing.read()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        info = raw.recv(65536)
        raw.sendall(hello)
        assert info.startswith(b"INFO ") and b'"tls_required":true' in info, info
        done = False
        while not done:
            data = raw.recv(65536)
            if not data:
                return b"closed during the handshake"
            if b"-ERR" in data:
                return data
            incoming.write(data)
            done = step()
            raw.sendall(outgoing.read())
        tls.write(b"CONNECT {}\r\nPING\r\n")
        raw.sendall(outgoing.read())
        answer = b""
        while b"PONG\r\n" not in answer and b"-ERR" not in answer:
            data = raw.recv(65536)
            if not data:
                break
            incoming.write(data)
            try:
                answer += tls.read(65536)
            except ssl.SSLWantReadError:
                continue
        return answer


def test_tls_upgrade_when_the_hello_follows_info_at_once(
    certs: dict[str, Any], tmp_path: Path
) -> None:
    # The TLS hello must never reach the plain-text parser, however soon it follows INFO.
    # Run as users run it (its own process, on uvloop): that is where the race showed.
    import socket
    import subprocess
    import sys
    import time

    port = free_port()
    conf = tmp_path / "tls.conf"
    conf.write_text(
        f'listen: "127.0.0.1:{port}"\n'
        f'tls {{ cert_file: "{certs["cert"]}", key_file: "{certs["key"]}" }}\n'
    )
    proc = subprocess.Popen([sys.executable, "-m", "jetraft", "server", "-c", str(conf)])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
                time.sleep(0.05)
        for _ in range(60):
            answer = _tls_client_answering_info_at_once(port, certs["ca"])
            assert answer.endswith(b"PONG\r\n"), answer
    finally:
        proc.terminate()
        proc.wait(15)


async def test_connz_subscription_details(make_server: ServerFactory) -> None:
    # /connz?subs=detail lists each subscription (subject, queue group, sid, messages, the
    # auto-unsubscribe limit, cid) in the shape nats-server 2.15 gives; nats.js's test
    # launcher compares the client's subscriptions with it.
    server: Server = await make_server(http=True)
    assert server.monitor is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", server.client_port)
    cid = json.loads((await reader.readline())[5:])["client_id"]
    writer.write(b"CONNECT {}\r\nSUB a 1\r\nSUB b q 2\r\nUNSUB 2 5\r\nPUB a 1\r\nx\r\nPING\r\n")
    while (await asyncio.wait_for(reader.readline(), 5)) != b"PONG\r\n":
        pass
    status, connz = await _http_get(server.monitor.port, f"/connz?subs=detail&cid={cid}")
    assert status == 200
    conn = connz["connections"][0]
    assert "subscriptions_list" not in conn
    assert sorted(conn["subscriptions_list_detail"], key=lambda d: d["sid"]) == [
        {"subject": "a", "sid": "1", "msgs": 1, "cid": cid},
        {"subject": "b", "qgroup": "q", "sid": "2", "msgs": 0, "max": 5, "cid": cid},
    ]
    writer.close()
