"""The walls between accounts and around JetStream, through nats-py: a normal account never
reaches the system account's subjects or another account's $JS.API, a user without JetStream
permission gets permission violations, and bad credentials of every kind are refused with
'Authorization Violation'."""

from __future__ import annotations

import time
from pathlib import Path

import nats
import pytest
from nats.errors import NoRespondersError, TimeoutError
from nats.js.errors import NotFoundError

from jetraft.server.server import Server
from tests.natsauth import Key, Operator, creds, encode_jwt, user_jwt

from .conftest import ServerFactory, connect, wait_for
from .test_security_auth import refusal


async def nothing_arrives(sub: nats.aio.subscription.Subscription) -> bool:
    """A bounded negative wait: the point is that nothing crosses the wall."""
    try:
        await sub.next_msg(timeout=0.3)
    except TimeoutError:
        return True
    return False


def accounts_conf(tmp: Path) -> str:
    return f"""
jetstream {{ store_dir: "{tmp}" }}
accounts {{
  $SYS {{ users = [ {{user: sys, password: sys}} ] }}
  A {{ jetstream: enabled, users = [ {{user: a, password: a}} ] }}
  B {{ jetstream: enabled, users = [
    {{user: b, password: b}}
    {{user: nojs, password: nojs, permissions: {{
        publish: {{ deny: "$JS.API.>" }}, subscribe: {{ deny: "$JS.API.>" }} }} }}
  ] }}
}}
"""


async def test_normal_account_cannot_reach_system_subjects(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    server = await make_server(accounts_conf(tmp_path))
    sys = await connect(server, user="sys", password="sys")
    a = await connect(server, user="a", password="a")
    sys_sub = await sys.subscribe("$SYS.>")
    a_sub = await a.subscribe("$SYS.>")
    await sys.flush()
    await a.flush()
    # A publishes on system subjects: it only ever talks to its own account.
    await a.publish("$SYS.REQ.SERVER.PING", b"from A")
    await a.flush()
    assert (await a_sub.next_msg(timeout=2)).data == b"from A"
    assert await nothing_arrives(sys_sub)
    # The system account's traffic never reaches A's wildcard subscription.
    await sys.publish("$SYS.ACCOUNT.A.CONNECT", b"event")
    await sys.flush()
    assert (await sys_sub.next_msg(timeout=2)).data == b"event"
    assert await nothing_arrives(a_sub)
    await a_sub.unsubscribe()  # else A would be its own responder
    with pytest.raises(NoRespondersError):
        await a.request("$SYS.REQ.SERVER.PING", b"", timeout=1)
    await sys.close()
    await a.close()


async def test_account_cannot_reach_another_accounts_jetstream_api(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    server = await make_server(accounts_conf(tmp_path))
    a = await connect(server, user="a", password="a")
    b = await connect(server, user="b", password="b")
    await a.jetstream().add_stream(name="SECRET", subjects=["secret.>"])
    await a.jetstream().publish("secret.1", b"a's data")
    # B's API is B's own: A's stream does not exist there, and B cannot read it.
    with pytest.raises(NotFoundError):
        await b.jetstream().stream_info("SECRET")
    assert (await b.jetstream().account_info()).streams == 0
    # B listening on $JS.API.> sees no API traffic of A's.
    spy = await b.subscribe("$JS.API.>")
    await b.flush()
    await a.jetstream().stream_info("SECRET")
    assert await nothing_arrives(spy)
    # Nor does B's publish on A's stream subject land in A's stream.
    await b.publish("secret.2", b"b's data")
    await b.flush()
    assert (await a.jetstream().stream_info("SECRET")).state.messages == 1
    await a.close()
    await b.close()


async def test_user_without_jetstream_permission_gets_violations(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    server = await make_server(accounts_conf(tmp_path))
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    nc = await connect(server, user="nojs", password="nojs", error_cb=on_error)
    with pytest.raises((TimeoutError, nats.js.errors.Error, NoRespondersError)):
        await nc.jetstream(timeout=1).account_info()
    await wait_for(lambda: errors, what="publish violation")
    assert 'permissions violation for publish to "$js.api.info"' in str(errors[0]).lower()
    await nc.subscribe("$JS.API.STREAM.LIST")
    await nc.flush()
    await wait_for(lambda: len(errors) > 1, what="subscribe violation")
    assert 'permissions violation for subscription to "$js.api.stream.list"' in (
        str(errors[1]).lower()
    )
    await nc.close()


async def test_bad_credentials_are_authorization_violations(
    make_server: ServerFactory, tmp_path: Path
) -> None:
    user = Key.new("user")
    server = await make_server(
        f"accounts {{ A {{ users = [ {{user: a, password: right}}, {{nkey: {user.public}}} ] }} }}"
    )
    assert "authorization violation" in await refusal(server, user="a", password="wrong")
    assert "authorization violation" in await refusal(server, user="nobody", password="right")
    assert "authorization violation" in await refusal(
        server, nkeys_seed_str=Key.new("user").seed)
    assert "authorization violation" in await refusal(server, token="anything")


async def operator_server(make_server: ServerFactory, tmp_path: Path) -> tuple[
    Server, Operator, Key, Key
]:
    op = Operator(system=Key.new("account"))
    system = op.system
    assert system is not None
    op.accounts[system.public] = encode_jwt(
        op.key, "account", system.public, {"limits": {"subs": -1, "payload": -1, "conn": -1}})
    x, y = op.account(jetstream=True), op.account(jetstream=True)
    server = await make_server(op.config(extra=f'jetstream {{ store_dir: "{tmp_path}" }}'))
    return server, op, x, y


async def jwt_client(server: Server, tmp_path: Path, account: Key, **nats: object) -> nats.NATS:
    user = Key.new("user")
    path = tmp_path / f"{user.public[:10]}.creds"
    path.write_text(creds(user_jwt(account, user, **nats), user))
    return await connect(server, user_credentials=str(path))


async def test_operator_mode_walls(make_server: ServerFactory, tmp_path: Path) -> None:
    server, op, x, y = await operator_server(make_server, tmp_path)
    assert op.system is not None
    nx = await jwt_client(server, tmp_path, x)
    ny = await jwt_client(server, tmp_path, y)
    nsys = await jwt_client(server, tmp_path, op.system)
    # JetStream from the account JWTs, one API per account.
    await nx.jetstream().add_stream(name="X", subjects=["x.>"])
    with pytest.raises(NotFoundError):
        await ny.jetstream().stream_info("X")
    sys_sub = await nsys.subscribe("$SYS.>")
    await nsys.flush()
    await nx.publish("$SYS.REQ.ACCOUNT.PING.CONNZ", b"")
    await nx.flush()
    assert await nothing_arrives(sys_sub)
    for nc in (nx, ny, nsys):
        await nc.close()


async def test_operator_mode_refusals(make_server: ServerFactory, tmp_path: Path) -> None:
    server, _, x, _ = await operator_server(make_server, tmp_path)
    user = Key.new("user")
    stranger = Operator()
    stranger_account = stranger.account()
    cases = {
        "expired": user_jwt(x, user, expires=int(time.time()) - 1),
        "untrusted operator": user_jwt(stranger_account, user),
        "forged signature": user_jwt(x, user)[:-6] + "AAAAAA",
    }
    for what, jwt in cases.items():
        path = tmp_path / "bad.creds"
        path.write_text(creds(jwt, user))
        assert "authorization violation" in await refusal(server, user_credentials=str(path)), what
