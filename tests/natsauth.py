"""Test credentials: nkeys made with the ``nkeys`` package and NATS JWTs signed with them.

The JWT layout is the one nats-server reads (nats-io/jwt v2: ``ed25519-nkey`` over
``header.claims``; v1: ``ed25519`` over the claims part alone), written here independently so
that tests can also forge broken ones (expired, wrong issuer, bad signature).
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

import nkeys

UNLIMITED = {"subs": -1, "data": -1, "payload": -1}
JS_UNLIMITED = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class Key:
    """An nkey pair of one role: operator, account or user."""

    role: str
    pair: Any = field(repr=False)

    @classmethod
    def new(cls, role: str) -> Key:
        prefix = getattr(nkeys, f"PREFIX_BYTE_{role.upper()}")
        seed = nkeys.encode_seed(os.urandom(32), prefix)
        return cls(role, nkeys.from_seed(bytearray(seed)))

    @property
    def public(self) -> str:
        return bytes(self.pair.public_key).decode()

    @property
    def seed(self) -> str:
        return bytes(self.pair.seed).decode()

    def sign(self, data: bytes) -> bytes:
        return bytes(self.pair.sign(data))


def encode_jwt(
    signer: Key, kind: str, subject: str, nats: dict[str, Any], *, version: int = 2,
    expires: int = 0, name: str = "", iat: int | None = None,
) -> str:
    claims: dict[str, Any] = {
        "jti": b64url(os.urandom(12)), "iat": int(time.time()) if iat is None else iat,
        "iss": signer.public, "name": name or subject[:8], "sub": subject,
    }
    if expires:
        claims["exp"] = expires
    if version == 1:
        header = {"typ": "jwt", "alg": "ed25519"}
        claims.update(type=kind, nats=nats)
    else:
        header = {"typ": "JWT", "alg": "ed25519-nkey"}
        claims["nats"] = {**nats, "type": kind, "version": 2}
    head = b64url(json.dumps(header).encode())
    body = b64url(json.dumps(claims).encode())
    signed = body if version == 1 else f"{head}.{body}"
    return f"{head}.{body}.{b64url(signer.sign(signed.encode()))}"


@dataclass
class Operator:
    """An operator with accounts and users: what ``nsc`` would make, in memory."""

    key: Key = field(default_factory=lambda: Key.new("operator"))
    system: Key | None = None
    accounts: dict[str, str] = field(default_factory=dict)  # account public key -> JWT
    _jwt: str = ""

    def jwt(self) -> str:
        """The operator JWT (made once, so that tests can find it in the config text)."""
        if not self._jwt:
            nats = {"system_account": self.system.public} if self.system is not None else {}
            self._jwt = encode_jwt(self.key, "operator", self.key.public, nats)
        return self._jwt

    def account(self, *, jetstream: bool = False, signer: Key | None = None,
                **nats: Any) -> Key:
        acc = Key.new("account")
        limits = {**UNLIMITED, "conn": -1, **(JS_UNLIMITED if jetstream else {})}
        nats.setdefault("limits", limits)
        self.accounts[acc.public] = encode_jwt(signer or self.key, "account", acc.public, nats)
        return acc

    def config(self, *, preload: dict[str, str] | None = None, extra: str = "") -> str:
        entries = "\n".join(f'  {k}: "{v}"' for k, v in (preload or self.accounts).items())
        return (f'operator: "{self.jwt()}"\nresolver: MEMORY\n'
                f"resolver_preload: {{\n{entries}\n}}\n{extra}")


def user_jwt(account: Key, user: Key, *, signer: Key | None = None, **nats: Any) -> str:
    nats = {**UNLIMITED, **nats}
    if signer is not None and signer.public != account.public:
        nats.setdefault("issuer_account", account.public)
    expires = int(nats.pop("expires", 0))
    version = int(nats.pop("version", 2))
    return encode_jwt(signer or account, "user", user.public, nats, expires=expires,
                      version=version)


def creds(jwt: str, user: Key) -> str:
    """A ``.creds`` file's text, as ``nsc`` writes it."""
    return (f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
            f"-----BEGIN USER NKEY SEED-----\n{user.seed}\n------END USER NKEY SEED------\n")
