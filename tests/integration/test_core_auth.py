"""Users, bcrypt, tokens, permissions and account isolation, through nats-py."""

from __future__ import annotations

import asyncio

import nats
import pytest

from jetraft.server.server import Server

from .conftest import ServerFactory, connect, wait_for

SEED_SYS_HASH = "$2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm"
SEED_SYS_PASSWORD = "a very long s3cr3t! password"

ACCOUNTS_CONF = f"""
accounts {{
  $SYS {{
    users = [
      {{ user: "admin",
        pass: "{SEED_SYS_HASH}"
      }}
    ]
  }}
  A {{ users = [ {{user: a, password: a}} ] }}
  B {{ users = [ {{user: b, password: b}} ] }}
}}
"""


async def _fails_auth(server: Server, **kwargs: object) -> str:
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    with pytest.raises(Exception) as info:
        await connect(server, error_cb=on_error, max_reconnect_attempts=0, **kwargs)
    return str(info.value).lower() + " ".join(str(e).lower() for e in errors)


async def test_seed_sys_user_with_bcrypt(make_server: ServerFactory) -> None:
    server = await make_server(ACCOUNTS_CONF)
    nc = await connect(server, user="admin", password=SEED_SYS_PASSWORD)
    assert nc.is_connected
    sub = await nc.subscribe("$SYS.test")
    await nc.publish("$SYS.test", b"sys")
    assert (await sub.next_msg(timeout=2)).data == b"sys"
    await nc.close()
    assert "authorization violation" in await _fails_auth(
        server, user="admin", password="not the password"
    )


async def test_accounts_are_isolated(make_server: ServerFactory) -> None:
    server = await make_server(ACCOUNTS_CONF)
    a = await connect(server, user="a", password="a")
    b = await connect(server, user="b", password="b")
    sub_a = await a.subscribe("shared.subject")
    sub_b = await b.subscribe("shared.subject")
    await a.flush()
    await b.flush()
    await a.publish("shared.subject", b"for A only")
    await a.flush()
    assert (await sub_a.next_msg(timeout=2)).data == b"for A only"
    with pytest.raises(nats.errors.TimeoutError):
        await sub_b.next_msg(timeout=0.3)
    # And a request in B does not find A's responder.
    async def answer(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(b"A")

    await a.subscribe("svc", cb=answer)
    await a.flush()
    with pytest.raises(nats.errors.NoRespondersError):
        await b.request("svc", b"", timeout=2)
    await a.close()
    await b.close()


async def test_wrong_password_and_missing_credentials(make_server: ServerFactory) -> None:
    server = await make_server('authorization { user: alice, password: "s3cret" }')
    nc = await connect(server, user="alice", password="s3cret")
    await nc.close()
    assert "authorization violation" in await _fails_auth(server, user="alice", password="x")
    assert "authorization violation" in await _fails_auth(server)


async def test_token_auth(make_server: ServerFactory) -> None:
    server = await make_server('authorization { token: "t0ken" }')
    nc = await connect(server, token="t0ken")
    await nc.close()
    assert "authorization violation" in await _fails_auth(server, token="wrong")


async def test_bcrypt_user_in_authorization_block(make_server: ServerFactory) -> None:
    import bcrypt

    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    users = f'users = [ {{user: bob, password: "{hashed}"}} ]'
    server = await make_server(f"authorization {{ {users} }}")
    nc = await connect(server, user="bob", password="pw")
    sub = await nc.subscribe("x")
    await nc.publish("x", b"1")
    assert (await sub.next_msg(timeout=2)).data == b"1"
    await nc.close()


PERMS_CONF = """
authorization {
  users = [
    { user: limited, password: p,
      permissions: {
        publish: { allow: ["orders.>", "_INBOX.>"], deny: ["orders.secret"] }
        subscribe: { allow: ["orders.*", "_INBOX.>"] }
      }
    }
    { user: svc, password: p,
      permissions: { subscribe: "svc.>", allow_responses: true }
    }
    { user: admin, password: p }
  ]
}
"""


async def test_publish_and_subscribe_permissions(make_server: ServerFactory) -> None:
    server = await make_server(PERMS_CONF)
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    nc = await connect(server, user="limited", password="p", error_cb=on_error)
    admin = await connect(server, user="admin", password="p")
    watch = await admin.subscribe("orders.>")
    await admin.flush()
    await nc.publish("orders.new", b"ok")
    await nc.publish("orders.secret", b"denied")
    await nc.publish("billing.x", b"denied")
    await nc.subscribe("billing.*")
    await nc.flush()
    assert (await watch.next_msg(timeout=2)).data == b"ok"
    with pytest.raises(nats.errors.TimeoutError):
        await watch.next_msg(timeout=0.3)
    # nats-py lower-cases the -ERR text before handing it to the error callback.
    texts = [str(e) for e in errors]
    assert any('permissions violation for publish to "orders.secret"' in t for t in texts)
    assert any('permissions violation for publish to "billing.x"' in t for t in texts)
    assert any('permissions violation for subscription to "billing.*"' in t for t in texts)
    # The connection is kept.
    assert nc.is_connected
    await nc.close()
    await admin.close()


async def test_allow_responses(make_server: ServerFactory) -> None:
    server = await make_server(PERMS_CONF)
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    svc = await connect(server, user="svc", password="p", error_cb=on_error)
    admin = await connect(server, user="admin", password="p")

    async def answer(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(b"answer")
        await msg.respond(b"second answer is not allowed")

    await svc.subscribe("svc.q", cb=answer)
    await svc.flush()
    reply = await admin.request("svc.q", b"?", timeout=2)
    assert reply.data == b"answer"
    await svc.publish("anything", b"x")
    await svc.flush()
    await wait_for(lambda: len(errors) >= 2, what="two permission errors")
    assert sum("permissions violation for publish" in str(e) for e in errors) == 2
    await svc.close()
    await admin.close()


async def test_auth_timeout(make_server: ServerFactory) -> None:
    server = await make_server('authorization { user: u, password: p, timeout: 0.2 }')
    reader, writer = await asyncio.open_connection("127.0.0.1", server.client_port)
    assert (await reader.readline()).startswith(b"INFO ")
    line = await asyncio.wait_for(reader.readline(), 5)
    assert line == b"-ERR 'Authentication Timeout'\r\n"
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
