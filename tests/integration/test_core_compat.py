"""Core behaviours found by running real clients' suites (nats.py, nats.js) against jetraft,
each checked against what nats-server 2.15 does on the wire."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats

from jetraft.server.server import Server

from .conftest import ServerFactory, connect


class Raw:
    """A bare TCP client that speaks exactly the CONNECT options a test gives it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.info: dict[str, Any] = {}

    @classmethod
    async def open(cls, server: Server, options: dict[str, Any] | None = None) -> Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.client_port)
        raw = cls(reader, writer)
        line = await raw.line()
        assert line.startswith(b"INFO {")
        raw.info = json.loads(line[5:])
        if options is not None:
            raw.writer.write(b"CONNECT " + json.dumps(options).encode() + b"\r\nPING\r\n")
            assert await raw.line() == b"PONG\r\n"
        return raw

    async def line(self) -> bytes:
        return await asyncio.wait_for(self.reader.readline(), 5)

    async def exactly(self, n: int) -> bytes:
        return await asyncio.wait_for(self.reader.readexactly(n), 5)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def test_lone_server_advertises_no_connect_urls(make_server: ServerFactory) -> None:
    # nats-py adds every INFO connect_url its pool lacks, comparing netlocs: a lone server
    # advertising "127.0.0.1:port" made a credential-less duplicate of a "user:pass@..." URL,
    # and reconnects then tried it and failed authorization (nats.py
    # test_failed_reconnect_removes_servers, test_tls_reconnect, test_server_pool_property).
    server = await make_server("authorization { user: foo, password: bar }\n")
    raw = await Raw.open(server)
    assert "connect_urls" not in raw.info
    await raw.close()
    nc = await nats.connect(f"nats://foo:bar@127.0.0.1:{server.client_port}", allow_reconnect=False)
    assert nc.discovered_servers == []
    assert len(nc.servers) == 1
    await nc.close()


async def test_connect_urls_list_self_and_routed_peers(server: Server) -> None:
    # The route layer fills route_client_urls; INFO then lists this server first, then peers.
    server.route_client_urls = ["127.0.0.1:14999"]
    raw = await Raw.open(server)
    assert raw.info["connect_urls"] == [f"127.0.0.1:{server.client_port}", "127.0.0.1:14999"]
    await raw.close()


async def test_headers_are_stripped_for_a_client_without_headers_support(
    server: Server,
) -> None:
    # nats-server delivers the payload alone (MSG) to a subscriber whose CONNECT said
    # headers:false; jetraft used to drop such messages.
    old = await Raw.open(server, {"verbose": False, "pedantic": False, "headers": False})
    await old.send(b"SUB news 1\r\nSUB news.empty 2\r\nPING\r\n")
    assert await old.line() == b"PONG\r\n"
    nc = await connect(server)
    await nc.publish("news", b"hello", headers={"Trace-Id": "t1"}, reply="inbox.1")
    await nc.publish("news.empty", b"", headers={"Only": "headers"})
    await nc.flush()
    assert await old.line() == b"MSG news 1 inbox.1 5\r\n"
    assert await old.exactly(7) == b"hello\r\n"
    assert await old.line() == b"MSG news.empty 2 0\r\n"
    assert await old.exactly(2) == b"\r\n"
    # A header-aware subscriber on the same subject still gets the headers.
    sub = await nc.subscribe("news")
    await nc.publish("news", b"again", headers={"Trace-Id": "t2"})
    msg = await sub.next_msg(timeout=2)
    assert msg.headers == {"Trace-Id": "t2"}
    assert await old.line() == b"MSG news 1 5\r\n"
    await nc.close()
    await old.close()


async def test_stripped_delivery_counts_as_a_responder(server: Server) -> None:
    # The headers-less responder is a real responder: no 503 for the requester.
    responder = await Raw.open(server, {"verbose": False, "pedantic": False, "headers": False})
    await responder.send(b"SUB svc 1\r\nPING\r\n")
    assert await responder.line() == b"PONG\r\n"
    nc = await connect(server)
    request = asyncio.ensure_future(nc.request("svc", b"q", timeout=5, headers={"X": "1"}))
    head = await responder.line()
    assert head.startswith(b"MSG svc 1 _INBOX.") and head.endswith(b" 1\r\n"), head
    assert await responder.exactly(3) == b"q\r\n"
    reply_to = head.split()[3]
    await responder.send(b"PUB " + reply_to + b" 2\r\nok\r\n")
    assert (await request).data == b"ok"
    await nc.close()
    await responder.close()


async def test_hpub_with_empty_header_block_is_a_plain_message(server: Server) -> None:
    # "HPUB subj 0 n" has no NATS/1.0 block; nats-server forwards it as MSG. An HMSG with a
    # zero-length block has no status line for clients' header parsers to read.
    sub = await Raw.open(server, {"verbose": False, "pedantic": False, "headers": True})
    await sub.send(b"SUB plain 1\r\nPING\r\n")
    assert await sub.line() == b"PONG\r\n"
    pub = await Raw.open(server, {"verbose": False, "pedantic": False, "headers": True})
    await pub.send(b"HPUB plain 0 2\r\nhi\r\nPING\r\n")
    assert await pub.line() == b"PONG\r\n"
    assert await sub.line() == b"MSG plain 1 2\r\n"
    assert await sub.exactly(4) == b"hi\r\n"
    await sub.close()
    await pub.close()


async def test_info_advertises_the_jetstream_api_level(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    # nats-server (2.11 on) puts the JetStream API level it serves in every INFO as api_lvl,
    # with or without JetStream; nats.js reads it (its "basics - info api_lvl" test).
    from jetraft.jetstream.api_types import API_LEVEL

    for conf in ("", f'jetstream {{ store_dir: "{tmp_path}" }}\n'):
        server = await make_server(conf)
        raw = await Raw.open(server)
        assert raw.info["api_lvl"] == API_LEVEL >= 1
        await raw.close()
