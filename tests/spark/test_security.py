"""Credentials: user/password, token, TLS files, creds and nkey seed files, through Spark.

Every server here is started by this module from its own config file (loopback, free port,
temporary directory) and ended by pid when the module is done. jetraft serves the password,
token and TLS cases; nats-server serves the creds file (operator mode: jetraft has no JWT
accounts) and the nkey seed cases. Each working credential carries a real Spark write and a
real Spark read; each wrong one must fail on the driver, before any Spark job, with a
message that names the servers and the cause. (A DataFrame's load() is lazy: the driver
connects when the first action plans the read; a writer connects when it is created.)
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme

from tests.spark.support import _free_port, _nats_server_binary, end_process, file_tail, run

F = pytest.importorskip("pyspark.sql.functions")

pytestmark = pytest.mark.spark

ROWS = 60


# --- servers ------------------------------------------------------------------------------


@dataclass
class ConfServer:
    """A server started from a config file; ``auth`` is what nats-py needs to get in."""

    name: str
    kind: str  # "jetraft" | "nats-server"
    base: Path
    body: str
    auth: dict[str, Any] = field(default_factory=dict)
    scheme: str = "nats"
    port: int = field(default_factory=_free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.base / "server.log"

    def start(self) -> None:
        store = self.base / "store"
        conf = self.base / "server.conf"
        conf.write_text(
            f"listen: 127.0.0.1:{self.port}\n"
            f'jetstream {{ store_dir: "{store}" }}\n'
            f"{self.body}\n"
        )
        if self.kind == "nats-server":
            command = [_nats_server_binary(), "-c", str(conf)]
        else:
            command = [sys.executable, "-m", "jetraft", "server", "-c", str(conf)]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"{self.name} exited: {self.log_tail()}"
            if "Server is ready" in self.log_tail() and _accepts(self.port):
                return
            time.sleep(0.05)
        raise AssertionError(f"{self.name} not ready on {self.url}: {self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None:
            end_process(self.proc)
        self.proc = None

    def log_tail(self) -> str:
        return file_tail(self.log_path)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def launch(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., ConfServer]]:
    started: list[ConfServer] = []

    def _launch(name: str, kind: str, body: str, **kw: Any) -> ConfServer:
        server = ConfServer(name, kind, tmp_path_factory.mktemp(name), body, **kw)
        started.append(server)
        server.start()
        return server

    yield _launch
    for server in started:
        server.stop()


# --- credentials --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("certs")
    ca, stranger = trustme.CA(), trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    client_cert = ca.issue_cert("spark-client@example.com")
    files = {
        "ca": (ca.cert_pem, "ca.pem"),
        "other_ca": (stranger.cert_pem, "other-ca.pem"),
        "server_cert": (server_cert.cert_chain_pems[0], "server.pem"),
        "server_key": (server_cert.private_key_pem, "server.key"),
        "client_cert": (client_cert.cert_chain_pems[0], "client.pem"),
        "client_key": (client_cert.private_key_pem, "client.key"),
    }
    out = {}
    for key, (blob, filename) in files.items():
        blob.write_to_path(str(base / filename))
        out[key] = str(base / filename)
    return out


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class Keys:
    """Ed25519 nkeys made with the ``nkeys`` package, and JWTs signed with them."""

    def __init__(self) -> None:
        self.nkeys = pytest.importorskip("nkeys")

    def new(self, role: str) -> Any:
        prefix = getattr(self.nkeys, f"PREFIX_BYTE_{role.upper()}")
        return self.nkeys.from_seed(bytearray(self.nkeys.encode_seed(os.urandom(32), prefix)))

    @staticmethod
    def public(pair: Any) -> str:
        return str(pair.public_key.decode())

    @staticmethod
    def seed(pair: Any) -> str:
        return str(pair.seed.decode())

    def jwt(self, issuer: Any, subject: str, name: str, nats: dict[str, Any]) -> str:
        """A JWT as the NATS servers read it: ed25519-nkey signature over header.claims."""
        claims: dict[str, Any] = {
            "iat": int(time.time()),
            "iss": self.public(issuer),
            "name": name,
            "sub": subject,
            "nats": {**nats, "version": 2},
        }
        digest = hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).digest()
        claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
        head = _b64url(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
        body = _b64url(json.dumps(claims).encode())
        signature = issuer.sign(f"{head}.{body}".encode())
        return f"{head}.{body}.{_b64url(signature)}"

    def account_jwt(self, operator: Any, account: Any, name: str, jetstream: bool) -> str:
        limits: dict[str, Any] = {
            "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
            "wildcards": True, "conn": -1, "leaf": -1,
        }  # fmt: skip
        if jetstream:  # the account may use JetStream only when its storage limits allow it
            limits.update({"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1})
        nats = {"type": "account", "limits": limits}
        return self.jwt(operator, self.public(account), name, nats)

    def creds(self, account: Any, path: Path) -> str:
        """A new user of ``account``, written as a .creds file (user JWT + seed)."""
        user = self.new("user")
        nats = {"type": "user", "subs": -1, "data": -1, "payload": -1, "pub": {}, "sub": {}}
        token = self.jwt(account, self.public(user), "spark", nats)
        path.write_text(
            "-----BEGIN NATS USER JWT-----\n"
            f"{token}\n"
            "------END NATS USER JWT------\n\n"
            "The seed below proves this user's identity: keep this file secret.\n\n"
            "-----BEGIN USER NKEY SEED-----\n"
            f"{self.seed(user)}\n"
            "------END USER NKEY SEED------\n"
        )
        return str(path)


# --- the servers of this module -----------------------------------------------------------


@pytest.fixture(scope="module")
def pw_server(launch: Callable[..., ConfServer]) -> ConfServer:
    bcrypt = pytest.importorskip("bcrypt")
    hashed = bcrypt.hashpw(b"alice-secret", bcrypt.gensalt(4)).decode()
    body = (
        "accounts { APP { jetstream: enabled, users: [\n"
        f'  {{ user: alice, password: "{hashed}" }}\n'
        '  { user: bob, password: "bob-plain" }\n'
        "] } }"
    )
    return launch("pw", "jetraft", body, auth={"user": "alice", "password": "alice-secret"})


@pytest.fixture(scope="module")
def token_server(launch: Callable[..., ConfServer]) -> ConfServer:
    body = 'authorization { token: "t0ken-for-spark" }'
    return launch("token", "jetraft", body, auth={"token": "t0ken-for-spark"})


def _tls_body(certs: dict[str, str], verify: bool) -> str:
    extra = f', ca_file: "{certs["ca"]}", verify: true' if verify else ""
    files = f'cert_file: "{certs["server_cert"]}", key_file: "{certs["server_key"]}"'
    return f"tls {{ {files}{extra} }}"


@pytest.fixture(scope="module")
def tls_server(launch: Callable[..., ConfServer], certs: dict[str, str]) -> ConfServer:
    ctx = ssl.create_default_context(cafile=certs["ca"])
    return launch("tls", "jetraft", _tls_body(certs, False), auth={"tls": ctx}, scheme="tls")


@pytest.fixture(scope="module")
def mtls_server(launch: Callable[..., ConfServer], certs: dict[str, str]) -> ConfServer:
    ctx = ssl.create_default_context(cafile=certs["ca"])
    ctx.load_cert_chain(certs["client_cert"], certs["client_key"])
    return launch("mtls", "jetraft", _tls_body(certs, True), auth={"tls": ctx}, scheme="tls")


@dataclass
class Operator:
    server: ConfServer
    creds_file: str
    stranger_creds_file: str  # a user of an account this server does not know


@pytest.fixture(scope="module")
def operator(
    launch: Callable[..., ConfServer], tmp_path_factory: pytest.TempPathFactory
) -> Operator:
    keys = Keys()
    base = tmp_path_factory.mktemp("jwt")
    op, system, app, unknown = (keys.new(r) for r in ("operator", "account", "account", "account"))
    op_jwt = keys.jwt(
        op, keys.public(op), "spark-op",
        {"type": "operator", "system_account": keys.public(system)},
    )  # fmt: skip
    (base / "operator.jwt").write_text(op_jwt)
    body = (
        f'operator: "{base / "operator.jwt"}"\n'
        f"system_account: {keys.public(system)}\n"
        "resolver: MEMORY\n"
        "resolver_preload: {\n"
        f'  {keys.public(system)}: "{keys.account_jwt(op, system, "SYS", jetstream=False)}"\n'
        f'  {keys.public(app)}: "{keys.account_jwt(op, app, "APP", jetstream=True)}"\n'
        "}"
    )
    creds = keys.creds(app, base / "app.creds")
    stranger = keys.creds(unknown, base / "stranger.creds")
    server = launch("operator", "nats-server", body, auth={"user_credentials": creds})
    return Operator(server, creds, stranger)


@dataclass
class NkeyUsers:
    server: ConfServer
    seed_file: str
    stranger_seed_file: str  # a valid nkey seed the server does not list


@pytest.fixture(scope="module")
def nkey_users(
    launch: Callable[..., ConfServer], tmp_path_factory: pytest.TempPathFactory
) -> NkeyUsers:
    keys = Keys()
    base = tmp_path_factory.mktemp("nkeys")
    user, stranger = keys.new("user"), keys.new("user")
    (base / "user.nk").write_text(keys.seed(user) + "\n")
    (base / "stranger.nk").write_text(keys.seed(stranger) + "\n")
    body = f"authorization {{ users: [ {{ nkey: {keys.public(user)} }} ] }}"
    server = launch("nkey", "nats-server", body, auth={"nkeys_seed": str(base / "user.nk")})
    return NkeyUsers(server, str(base / "user.nk"), str(base / "stranger.nk"))


# --- helpers ------------------------------------------------------------------------------


async def _admin(server: ConfServer, fn: Callable[[Any], Any]) -> Any:
    import nats

    nc = await nats.connect(server.url, allow_reconnect=False, connect_timeout=5, **server.auth)
    try:
        return await fn(nc.jetstream(timeout=10))
    finally:
        await nc.close()


def _create_stream(server: ConfServer, name: str) -> None:
    from nats.js.api import StreamConfig

    config = StreamConfig(name=name, subjects=[f"{name.lower()}.>"], allow_direct=True)
    run(_admin(server, lambda js: js.add_stream(config)))


def _stored(server: ConfServer, name: str) -> int:
    async def _count(js: Any) -> int:
        return int((await js.stream_info(name)).state.messages)

    return int(run(_admin(server, _count)))


_names = itertools.count()


def _stream(tag: str) -> str:
    return f"SEC{tag.upper()}{next(_names)}"


def _write(
    spark: Any, stream: str, conn: dict[str, str], write_id: str | None = None, rows: int = ROWS
) -> None:
    df = spark.range(0, rows, 1, min(rows, 2)).select(
        F.concat(F.lit(f"{stream.lower()}."), (F.col("id") % 3).cast("string")).alias("subject"),
        F.concat(F.lit("row-"), F.col("id").cast("string")).alias("data"),
    )
    writer = df.write.format("jetstream").mode("append")
    for key, value in {**conn, **({"writeId": write_id} if write_id else {})}.items():
        writer = writer.option(key, value)
    writer.save()


def _reader(spark: Any, stream: str, conn: dict[str, str]) -> Any:
    reader = spark.read.format("jetstream").option("stream", stream)
    for key, value in conn.items():
        reader = reader.option(key, value)
    return reader


def _read_datas(spark: Any, stream: str, conn: dict[str, str]) -> list[bytes]:
    return sorted(bytes(r["data"]) for r in _reader(spark, stream, conn).load().collect())


EXPECTED = sorted(f"row-{i}".encode() for i in range(ROWS))


def _write_then_read(
    spark: Any, server: ConfServer, conn: dict[str, str], read_conns: list[dict[str, str]]
) -> None:
    """A stream made with nats-py; the connector writes it and reads it back."""
    stream = _stream(server.name)
    _create_stream(server, stream)
    _write(spark, stream, conn, write_id=f"job-{stream}")  # writeId: the driver connects too
    assert _stored(server, stream) == ROWS
    for read_conn in read_conns:
        assert _read_datas(spark, stream, read_conn) == EXPECTED


_groups = itertools.count()


def _fails_before_any_job(spark: Any, action: Callable[[], Any], *patterns: str) -> str:
    """``action`` raises on the driver (no Spark job ran) with every pattern in its message."""
    sc = spark.sparkContext
    group = f"security-{next(_groups)}"
    sc.setJobGroup(group, "bad credentials")
    try:
        with pytest.raises(Exception) as info:
            action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    text = str(info.value)
    for pattern in patterns:
        assert re.search(pattern, text), f"{pattern!r} not in {text}"
    assert sc.statusTracker().getJobIdsForGroup(group) == [], "a Spark job ran"
    return text


def _cannot_connect(url: str) -> str:
    return re.escape(f"jetstream source: cannot connect to {url}:")


# --- user / password ------------------------------------------------------------------------


def test_user_password(spark: Any, pw_server: ConfServer) -> None:
    alice = {"servers": pw_server.url, "user": "alice", "password": "alice-secret"}
    bob = {"servers": pw_server.url, "user": "bob", "password": "bob-plain"}
    _write_then_read(spark, pw_server, alice, [alice, bob])  # bcrypt hash, plain password


def test_wrong_password_fails_on_the_driver(spark: Any, pw_server: ConfServer) -> None:
    stream = _stream("pwbad")
    _create_stream(pw_server, stream)
    wrong = {"servers": pw_server.url, "user": "alice", "password": "not-her-password"}
    expected = (_cannot_connect(pw_server.url), r"Authorization Violation")
    _fails_before_any_job(spark, lambda: _reader(spark, stream, wrong).load().count(), *expected)
    _fails_before_any_job(spark, lambda: _write(spark, stream, wrong, f"w-{stream}"), *expected)
    nobody = {"servers": pw_server.url}
    _fails_before_any_job(spark, lambda: _reader(spark, stream, nobody).load().count(), *expected)
    assert _stored(pw_server, stream) == 0


def test_wrong_password_fails_a_write_before_its_tasks(spark: Any, pw_server: ConfServer) -> None:
    """Without writeId too, the writer connects on the driver first: no job, same message."""
    stream = _stream("pwtask")
    _create_stream(pw_server, stream)
    wrong = {"servers": pw_server.url, "user": "alice", "password": "not-her-password"}
    _fails_before_any_job(
        spark,
        lambda: _write(spark, stream, wrong, rows=1),
        _cannot_connect(pw_server.url),
        r"Authorization Violation",
    )
    assert _stored(pw_server, stream) == 0


# --- token ----------------------------------------------------------------------------------


def test_token(spark: Any, token_server: ConfServer) -> None:
    conn = {"servers": token_server.url, "token": "t0ken-for-spark"}
    _write_then_read(spark, token_server, conn, [conn])
    wrong = {"servers": token_server.url, "token": "guessed"}
    _fails_before_any_job(
        spark,
        lambda: _reader(spark, "ANY", wrong).load().count(),
        _cannot_connect(token_server.url),
        r"Authorization Violation",
    )


# --- TLS ------------------------------------------------------------------------------------


def test_tls_with_ca_file(spark: Any, tls_server: ConfServer, certs: dict[str, str]) -> None:
    tls_url = {"servers": tls_server.url, "tlsCaFile": certs["ca"]}
    nats_url = {"servers": f"nats://127.0.0.1:{tls_server.port}", "tlsCaFile": certs["ca"]}
    _write_then_read(spark, tls_server, tls_url, [tls_url, nats_url])


@pytest.mark.parametrize("ca", ["other_ca", None])
def test_tls_untrusted_server_fails_on_the_driver(
    spark: Any, tls_server: ConfServer, certs: dict[str, str], ca: str | None
) -> None:
    conn = {"servers": tls_server.url, **({"tlsCaFile": certs[ca]} if ca else {})}
    _fails_before_any_job(
        spark,
        lambda: _reader(spark, "ANY", conn).load().count(),
        _cannot_connect(tls_server.url),
        r"certificate verify failed",
    )


def test_tls_client_certificate(
    spark: Any, mtls_server: ConfServer, certs: dict[str, str]
) -> None:
    conn = {
        "servers": mtls_server.url,
        "tlsCaFile": certs["ca"],
        "tlsCertFile": certs["client_cert"],
        "tlsKeyFile": certs["client_key"],
    }
    _write_then_read(spark, mtls_server, conn, [conn])
    no_cert = {"servers": mtls_server.url, "tlsCaFile": certs["ca"]}
    _fails_before_any_job(
        spark,
        lambda: _reader(spark, "ANY", no_cert).load().count(),
        _cannot_connect(mtls_server.url),
        r"give tlsCertFile and tlsKeyFile",
    )


# --- creds file (operator mode) and nkey seed file -----------------------------------------


def test_creds_file(spark: Any, operator: Operator) -> None:
    conn = {"servers": operator.server.url, "credsFile": operator.creds_file}
    _write_then_read(spark, operator.server, conn, [conn])


@pytest.mark.parametrize(
    ("which", "message"),
    [
        ("stranger", r"Authorization Violation"),
        ("missing", r"No such file or directory: '.*missing\.creds'"),
    ],
)
def test_bad_creds_file_fails_on_the_driver(
    spark: Any, operator: Operator, tmp_path: Path, which: str, message: str
) -> None:
    path = operator.stranger_creds_file if which == "stranger" else str(tmp_path / "missing.creds")
    conn = {"servers": operator.server.url, "credsFile": path}
    _fails_before_any_job(
        spark,
        lambda: _reader(spark, "ANY", conn).load().count(),
        _cannot_connect(operator.server.url),
        message,
    )


def test_nkey_seed_file(spark: Any, nkey_users: NkeyUsers) -> None:
    conn = {"servers": nkey_users.server.url, "nkeySeedFile": nkey_users.seed_file}
    _write_then_read(spark, nkey_users.server, conn, [conn])
    stranger = {"servers": nkey_users.server.url, "nkeySeedFile": nkey_users.stranger_seed_file}
    _fails_before_any_job(
        spark,
        lambda: _reader(spark, "ANY", stranger).load().count(),
        _cannot_connect(nkey_users.server.url),
        r"Authorization Violation",
    )


def test_seed_and_creds_options() -> None:
    from jetraft.spark.options import OptionError, parse_conn

    conn = parse_conn({"nkeySeedFile": "/keys/u.nk", "tlsCaFile": "/keys/ca.pem"})
    assert (conn.nkey_seed_file, conn.creds_file, conn.tls_ca_file) == (
        "/keys/u.nk", None, "/keys/ca.pem",
    )  # fmt: skip
    with pytest.raises(OptionError, match="credsFile and nkeySeedFile are exclusive"):
        parse_conn({"credsFile": "/keys/u.creds", "nkeySeedFile": "/keys/u.nk"})
    with pytest.raises(OptionError, match="tlsCertFile and tlsKeyFile must be given together"):
        parse_conn({"tlsCertFile": "/keys/c.pem"})
