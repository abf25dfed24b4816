"""nkey users and operator-mode JWT users, through nats-py: who gets in, who is refused with
'Authorization Violation', and what the JWT grants (permissions, limits, expiry)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import nats
import pytest

from jetraft.server.server import Server
from tests.natsauth import Key, Operator, creds, user_jwt

from .conftest import ServerFactory, connect, url, wait_for


async def refusal(server: Server, **kwargs: Any) -> str:
    """Connect expecting a refusal; return what nats-py reported (lower case)."""
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    with pytest.raises(Exception) as info:
        await connect(server, error_cb=on_error, max_reconnect_attempts=0, **kwargs)
    return (str(info.value) + " " + " ".join(str(e) for e in errors)).lower()


async def raw_info(server: Server) -> dict[str, Any]:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.client_port)
    line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    info: dict[str, Any] = json.loads(line.split(b" ", 1)[1])
    return info


# --- nkey users --------------------------------------------------------------------------------


async def test_nkey_user_signs_the_nonce(make_server: ServerFactory) -> None:
    user, other = Key.new("user"), Key.new("user")
    server = await make_server(
        f"accounts {{ A {{ users = [ {{nkey: {user.public}}} ] }} }}"
    )
    info = await raw_info(server)
    assert info["auth_required"] is True and len(info["nonce"]) >= 11
    assert (await raw_info(server))["nonce"] != info["nonce"]  # one per connection
    nc = await connect(server, nkeys_seed_str=user.seed)
    sub = await nc.subscribe("x")
    await nc.publish("x", b"hi")
    assert (await sub.next_msg(timeout=2)).data == b"hi"
    assert server.clients[max(server.clients)].account.name == "A"
    await nc.close()
    # Anonymous, an unknown nkey, and a known nkey with somebody else's signature.
    assert "authorization violation" in await refusal(server)
    assert "authorization violation" in await refusal(server, nkeys_seed_str=other.seed)

    def wrong_signature(nonce: str) -> bytes:
        import base64

        return base64.b64encode(other.sign(nonce.encode()))

    async def reject_bad_sig() -> str:
        errors: list[Exception] = []

        async def on_error(e: Exception) -> None:
            errors.append(e)

        nc = nats.NATS()
        nc._nkey = user.public  # the public key goes out as CONNECT's nkey; sig from `other`
        with pytest.raises(Exception) as exc:
            await nc.connect(
                url(server), signature_cb=wrong_signature, allow_reconnect=False,
                error_cb=on_error, connect_timeout=2,
            )
        return (str(exc.value) + " ".join(map(str, errors))).lower()

    assert "authorization violation" in await reject_bad_sig()


async def test_only_nkey_user_config_requires_auth(make_server: ServerFactory) -> None:
    """The issue's case: a config whose only user is an nkey user used to start with auth off,
    and an anonymous client landed in $G."""
    user = Key.new("user")
    server = await make_server(f"authorization {{ users = [ {{nkey: {user.public}}} ] }}")
    assert "authorization violation" in await refusal(server)
    assert "authorization violation" in await refusal(server, user="", password="")
    nc = await connect(server, nkeys_seed_str=user.seed)
    assert nc.is_connected
    await nc.close()


async def test_nkey_permissions_and_connection_types(make_server: ServerFactory) -> None:
    user, mqtt_only = Key.new("user"), Key.new("user")
    server = await make_server(
        f"authorization {{ users = [\n"
        f"  {{nkey: {user.public}, permissions: {{publish: {{deny: secret}}}}}}\n"
        f"  {{nkey: {mqtt_only.public}, allowed_connection_types: [MQTT]}}\n] }}"
    )
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    nc = await connect(server, nkeys_seed_str=user.seed, error_cb=on_error)
    await nc.publish("secret", b"x")
    await nc.flush()
    await wait_for(lambda: errors, what="permissions violation")
    assert 'permissions violation for publish to "secret"' in str(errors[0]).lower()
    await nc.close()
    assert "authorization violation" in await refusal(server, nkeys_seed_str=mqtt_only.seed)


async def test_nkey_no_auth_user(make_server: ServerFactory) -> None:
    user = Key.new("user")
    server = await make_server(
        f"no_auth_user: {user.public}\naccounts {{ A {{ users = [ {{nkey: {user.public}}} ] }} }}"
    )
    nc = await connect(server)
    await nc.flush()
    assert server.clients[max(server.clients)].account.name == "A"
    await nc.close()


# --- operator mode -----------------------------------------------------------------------------


@pytest.fixture
def operator() -> Operator:
    return Operator(system=Key.new("account"))


async def test_jwt_user_with_creds_file(
    make_server: ServerFactory, operator: Operator, tmp_path: Path
) -> None:
    acc = operator.account()
    user = Key.new("user")
    server = await make_server(operator.config())
    assert "nonce" in await raw_info(server)
    path = tmp_path / "u.creds"
    path.write_text(creds(user_jwt(acc, user), user))
    nc = await connect(server, user_credentials=str(path))
    sub = await nc.subscribe("hello")
    await nc.publish("hello", b"jwt")
    assert (await sub.next_msg(timeout=2)).data == b"jwt"
    conn = server.clients[max(server.clients)]
    assert conn.account.name == acc.public and conn.user is not None
    assert conn.user.name == user.public
    await nc.close()
    assert "authorization violation" in await refusal(server)
    assert "authorization violation" in await refusal(server, user="a", password="b")


async def test_jwt_v1_user_as_in_nats_py_fixtures(
    make_server: ServerFactory, operator: Operator, tmp_path: Path
) -> None:
    acc = operator.account()
    user = Key.new("user")
    server = await make_server(operator.config())
    path = tmp_path / "v1.creds"
    path.write_text(creds(user_jwt(acc, user, version=1), user))
    nc = await connect(server, user_credentials=str(path))
    await nc.subscribe("v1")
    await nc.flush()
    await nc.close()


async def refused_creds(server: Server, tmp_path: Path, jwt: str, user: Key) -> str:
    path = tmp_path / f"{user.public[:8]}.creds"
    path.write_text(creds(jwt, user))
    return await refusal(server, user_credentials=str(path))


def later_window() -> dict[str, str]:
    """A connect-time window that does not contain now: from 2 to 3 hours from now (UTC)."""
    def at(hours: int) -> str:
        return time.strftime("%H:%M:%S", time.gmtime(time.time() + hours * 3600))

    return {"start": at(2), "end": at(3)}


async def test_jwt_refusals(
    make_server: ServerFactory, operator: Operator, tmp_path: Path
) -> None:
    acc = operator.account()
    stranger_op = Operator()
    stranger_acc = stranger_op.account()
    signer = Key.new("account")
    server = await make_server(operator.config())
    user = Key.new("user")
    cases = {
        "expired": user_jwt(acc, user, expires=int(time.time()) - 5),
        "untrusted operator": user_jwt(stranger_acc, user),
        "unknown signing key": user_jwt(acc, user, signer=signer),
        "signed by a user": user_jwt(Key.new("user"), user),
        "proxy required": user_jwt(acc, user, proxy_required=True),
        "mqtt only": user_jwt(acc, user, allowed_connection_types=["MQTT"]),
        "from another network": user_jwt(acc, user, src=["10.0.0.0/8"]),
        "outside its connect times": user_jwt(acc, user, times=[later_window()],
                                              times_location="UTC"),
    }
    for what, jwt in cases.items():
        text = await refused_creds(server, tmp_path, jwt, user)
        assert "authorization violation" in text, what
    # A valid JWT of somebody else: the nonce is signed with the wrong key.
    other = Key.new("user")
    text = await refused_creds(server, tmp_path, user_jwt(acc, user), other)
    assert "authorization violation" in text


async def test_jwt_untrusted_account_in_preload_is_refused(
    make_server: ServerFactory, operator: Operator, tmp_path: Path
) -> None:
    """An account JWT in resolver_preload that another operator signed: its users never get in."""
    stranger = Operator()
    acc = stranger.account()
    operator.account()
    server = await make_server(operator.config(preload={**operator.accounts,
                                                        **stranger.accounts}))
    user = Key.new("user")
    assert "authorization violation" in await refused_creds(
        server, tmp_path, user_jwt(acc, user), user)


async def test_jwt_signing_keys_scopes_and_bearer(
    make_server: ServerFactory, operator: Operator, tmp_path: Path
) -> None:
    signer, scoped = Key.new("account"), Key.new("account")
    scope = {"kind": "user_scope", "key": scoped.public, "role": "r",
             "template": {"pub": {"allow": ["scoped.>"]}, "sub": {"allow": ["scoped.>"]},
                          "subs": -1, "payload": -1, "data": -1}}
    acc = operator.account(signing_keys=[signer.public, scope])
    no_bearer = operator.account(limits={"subs": -1, "payload": -1, "disallow_bearer": True})
    server = await make_server(operator.config())
    u1, u2 = Key.new("user"), Key.new("user")
    p1 = tmp_path / "u1.creds"
    p1.write_text(creds(user_jwt(acc, u1, signer=signer), u1))
    nc = await connect(server, user_credentials=str(p1))
    await nc.subscribe("anything")
    await nc.flush()
    await nc.close()
    # A scoped key's user gets the template's permissions...
    p2 = tmp_path / "u2.creds"
    scoped_jwt = user_jwt(acc, u2, signer=scoped)  # carries limits (-1): not allowed
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    # ...and must not carry permissions or limits of its own (nats-server refuses those).
    p2.write_text(creds(scoped_jwt, u2))
    assert "authorization violation" in await refusal(server, user_credentials=str(p2))
    bare = user_jwt_bare(acc, u2, scoped)
    p2.write_text(creds(bare, u2))
    nc = await connect(server, user_credentials=str(p2), error_cb=on_error)
    await nc.subscribe("scoped.ok")
    await nc.subscribe("other")
    await nc.flush()
    await wait_for(lambda: errors, what="scoped permissions violation")
    assert 'subscription to "other"' in str(errors[0]).lower()
    await nc.close()
    # Bearer tokens skip the nonce signature, unless the account disallows them.
    bearer_user = Key.new("user")
    bearer = user_jwt(acc, bearer_user, bearer_token=True)
    nc = await connect(server, user_jwt_cb=lambda: bearer.encode(),
                       signature_cb=lambda nonce: b"")
    await nc.flush()
    await nc.close()
    refused_bearer = user_jwt(no_bearer, bearer_user, bearer_token=True)
    assert "authorization violation" in await refusal(
        server, user_jwt_cb=lambda: refused_bearer.encode(), signature_cb=lambda n: b"")


def user_jwt_bare(acc: Key, user: Key, signer: Key) -> str:
    """A user JWT as nsc issues it under a scoped signing key: no permissions, no limits."""
    from tests.natsauth import encode_jwt

    return encode_jwt(signer, "user", user.public, {"issuer_account": acc.public})


async def test_jwt_permissions_limits_and_revocation(
    make_server: ServerFactory, operator: Operator, tmp_path: Path
) -> None:
    revoked = Key.new("user")
    acc = operator.account(revocations={revoked.public: int(time.time()) + 60})
    server = await make_server(operator.config())
    user = Key.new("user")
    path = tmp_path / "u.creds"
    path.write_text(creds(user_jwt(acc, user, pub={"deny": ["no.>"]}, subs=2, payload=16),
                          user))
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    nc = await connect(server, user_credentials=str(path), error_cb=on_error)
    await nc.publish("no.way", b"x")
    await nc.flush()
    await wait_for(lambda: errors, what="permissions violation")
    assert 'permissions violation for publish to "no.way"' in str(errors[0]).lower()
    conn = server.clients[max(server.clients)]
    await nc.subscribe("a")
    await nc.subscribe("b")
    await nc.flush()
    assert len(conn.subs) == 2
    # One over the JWT's subs limit: refused with nats-server's -ERR (nats-py then closes).
    await nc.subscribe("c")
    await wait_for(lambda: nc.is_closed, what="nats-py to close on the -ERR")
    assert "maximum subscriptions exceeded" in str(nc.last_error).lower()
    assert "authorization violation" in await refused_creds(
        server, tmp_path, user_jwt(acc, revoked), revoked)


async def test_jwt_expiry_closes_the_connection(
    make_server: ServerFactory, operator: Operator, tmp_path: Path
) -> None:
    acc = operator.account()
    server = await make_server(operator.config())
    user = Key.new("user")
    path = tmp_path / "u.creds"
    path.write_text(creds(user_jwt(acc, user, expires=int(time.time()) + 2), user))
    errors: list[Exception] = []
    closed = asyncio.Event()

    async def on_error(e: Exception) -> None:
        errors.append(e)

    async def on_closed() -> None:
        closed.set()

    nc = await connect(server, user_credentials=str(path), error_cb=on_error,
                       closed_cb=on_closed)
    assert nc.is_connected
    await asyncio.wait_for(closed.wait(), 10)
    assert "user authentication expired" in str(nc.last_error).lower()


async def test_account_connection_limit(
    make_server: ServerFactory, operator: Operator, tmp_path: Path
) -> None:
    acc = operator.account(limits={"subs": -1, "payload": -1, "conn": 1})
    server = await make_server(operator.config())
    user = Key.new("user")
    path = tmp_path / "u.creds"
    path.write_text(creds(user_jwt(acc, user), user))
    nc = await connect(server, user_credentials=str(path))
    text = await refusal(server, user_credentials=str(path))
    assert "maximum account active connections exceeded" in text
    await nc.close()


async def test_jwt_payload_limit(
    make_server: ServerFactory, operator: Operator, tmp_path: Path
) -> None:
    acc = operator.account()
    server = await make_server(operator.config())
    user = Key.new("user")
    path = tmp_path / "u.creds"
    path.write_text(creds(user_jwt(acc, user, payload=16), user))
    nc = await connect(server, user_credentials=str(path))
    sub = await nc.subscribe("small")
    await nc.publish("small", b"x" * 16)
    assert (await sub.next_msg(timeout=2)).data == b"x" * 16
    await nc.publish("small", b"x" * 17)  # one byte over the JWT's payload limit
    await wait_for(lambda: nc.is_closed, what="the server to close the connection")
    assert "maximum payload violation" in str(nc.last_error).lower()
