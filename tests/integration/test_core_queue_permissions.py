"""Subscribe permissions that name a queue group ("subject queue"), side by side with a real
nats-server: such an entry allows (or, in deny, refuses) queue subscriptions in that group
only. nats.js's own suite checks this; jetraft treated "q A" as a subject and refused all."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import ServerFactory
from tests.integration.jetstream.consumer_support import _free_port, _wait_port, nats_server_binary

pytestmark = pytest.mark.skipif(
    not Path(nats_server_binary()).exists(), reason="nats-server binary not installed"
)

CONF = """
authorization {
  users: [
    {user: a, password: a, permissions: {subscribe: ["q A", "w.* G*", "open"]}}
    {user: d, password: d, permissions: {subscribe: {allow: [">"], deny: ["s bad", "t"]}}}
    {user: m, password: m, permissions: {subscribe: {allow: [">"], deny: ["u", "u q1"]}}}
    {user: n, password: n, permissions: {subscribe: ["v", "v q1"]}}
  ]
}
"""
# (user, SUB arguments): each gets +OK or the server's -ERR.
CASES = [
    ("a", "q A"), ("a", "q"), ("a", "q bad"), ("a", "w.x G*"), ("a", "w.x G1"), ("a", "w.x"),
    ("a", "open"), ("a", "open any"),
    ("d", "s"), ("d", "s good"), ("d", "s bad"), ("d", "t"), ("d", "t any"),
    # A plain deny entry refuses every queue group, whatever queue entries say beside it;
    # queue entries in the allow list decide alone for a queue subscription.
    ("m", "u"), ("m", "u q1"), ("m", "u q2"), ("n", "v"), ("n", "v q1"), ("n", "v q2"),
]


async def _answers(port: int) -> list[str]:
    out = []
    for user, args in CASES:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await reader.readline()  # INFO
            writer.write(
                f'CONNECT {{"verbose":true,"user":"{user}","pass":"{user}"}}\r\n'
                f"SUB {args} 1\r\nPING\r\n".encode()
            )
            assert await asyncio.wait_for(reader.readline(), 5) == b"+OK\r\n"
            out.append((await asyncio.wait_for(reader.readline(), 5)).decode().strip())
        finally:
            writer.close()
    return out


async def test_queue_group_subscribe_permissions(
    tmp_path: Path, make_server: ServerFactory
) -> None:
    conf = tmp_path / "q.conf"
    port = _free_port()
    conf.write_text(f"listen: 127.0.0.1:{port}\n{CONF}")
    proc = subprocess.Popen([nats_server_binary(), "-c", str(conf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await _wait_port(port)
        theirs = await _answers(port)
    finally:
        proc.terminate()
        proc.wait(10)
    server = await make_server(CONF)
    ours = await _answers(server.client_port)
    assert ours == theirs
    ok = [args for (_, args), answer in zip(CASES, theirs, strict=True) if answer == "+OK"]
    assert ok == ["q A", "w.x G*", "open", "open any", "s", "s good", "v", "v q1"]
