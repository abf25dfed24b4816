"""The server configs of the clustering guide (seeds/000-003, copied verbatim) and our examples."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import bcrypt
import pytest

from jetraft.config import (
    AccountConfig,
    ClusterConfig,
    JetStreamConfig,
    ServerConfig,
    UserConfig,
    load_config,
    parse_raw,
)

SEEDS = Path(__file__).parent / "seeds"
EXAMPLES = Path(__file__).parents[3] / "examples"
SYS_HASH = "$2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm"
SYS_PASSWORD = "a very long s3cr3t! password"
HOSTS = {1: "host_a", 2: "host_b", 3: "host_c"}
SYS_ACCOUNT = AccountConfig("$SYS", (UserConfig("admin", SYS_HASH, None, "$SYS"),))


def expected(seed: str, node: int, path: Path) -> ServerConfig:
    with_accounts = seed in ("000", "003")
    scheme = "nats" if with_accounts else "nats-route"
    others = tuple(f"{scheme}://{HOSTS[n]}:6222" for n in (1, 2, 3) if n != node)
    return ServerConfig(
        server_name=f"n{node}-c1",
        host="0.0.0.0",
        port=4222,
        accounts=(SYS_ACCOUNT,) if with_accounts else (),
        system_account="$SYS",
        jetstream=JetStreamConfig(store_dir="/nats/storage"),
        cluster=ClusterConfig(
            name="C1",
            host="0.0.0.0" if with_accounts else "localhost",
            port=6222,
            routes=others,
        ),
        config_file=str(path),
    )


SEED_CASES = [(s, n) for s in ("000", "001", "002", "003") for n in (1, 2, 3)]


@pytest.mark.parametrize(("seed", "node"), SEED_CASES)
def test_seed_server_configs_parse_completely(seed: str, node: int) -> None:
    path = SEEDS / f"seed{seed}_n{node}.conf"
    cfg = load_config(path, env={})
    want = expected(seed, node, path)
    assert cfg == want
    assert cfg.warnings == ()
    # spelled out, so that a failure names the field
    assert cfg.server_name == want.server_name
    assert (cfg.host, cfg.port) == ("0.0.0.0", 4222)
    assert cfg.jetstream is not None and cfg.jetstream.store_dir == "/nats/storage"
    assert cfg.jetstream.sync_interval_ns == 0
    assert cfg.cluster == want.cluster
    assert cfg.accounts == want.accounts
    assert cfg.authorization is None and cfg.tls is None and cfg.no_auth_user == ""


def test_seed_raw_tree() -> None:
    raw = parse_raw((SEEDS / "seed000_n1.conf").read_text())
    assert raw == {
        "server_name": "n1-c1",
        "listen": 4222,
        "accounts": {"$SYS": {"users": [{"user": "admin", "pass": SYS_HASH}]}},
        "jetstream": {"store_dir": "/nats/storage"},
        "cluster": {
            "name": "C1",
            "listen": "0.0.0.0:6222",
            "routes": ["nats://host_b:6222", "nats://host_c:6222"],
        },
    }


def test_seed_bcrypt_hash_is_kept_literally() -> None:
    cfg = load_config(SEEDS / "seed003_n2.conf", env={})
    admin = cfg.accounts[0].users[0]
    assert admin.password == SYS_HASH
    assert bcrypt.checkpw(SYS_PASSWORD.encode(), admin.password.encode())


def test_single_example() -> None:
    cfg = load_config(EXAMPLES / "single.conf", env={})
    assert cfg.warnings == ()
    assert (cfg.server_name, cfg.host, cfg.port, cfg.http_port) == (
        "jetraft-1", "127.0.0.1", 4222, 8222)
    assert cfg.jetstream == JetStreamConfig(store_dir="./data/jetraft-1")
    assert cfg.account("$SYS") == SYS_ACCOUNT
    app = cfg.account("APP")
    assert app is not None and app.users == (UserConfig("app", "app", None, "APP"),)
    assert app.jetstream is not None
    assert cfg.no_auth_user == "app" and cfg.system_account == "$SYS"


@pytest.mark.parametrize("node", [1, 2, 3])
def test_cluster_examples(node: int) -> None:
    cfg = load_config(EXAMPLES / "cluster" / f"n{node}.conf", env={})
    assert cfg.warnings == ()
    assert (cfg.server_name, cfg.host, cfg.port) == (f"n{node}-c1", "127.0.0.1", 4221 + node)
    assert cfg.jetstream == JetStreamConfig(store_dir=f"./data/n{node}")
    assert cfg.accounts == (SYS_ACCOUNT,)
    assert cfg.cluster == ClusterConfig(
        name="C1", host="127.0.0.1", port=6221 + node,
        routes=tuple(f"nats://127.0.0.1:{6221 + n}" for n in (1, 2, 3) if n != node),
    )


def _nats_server() -> str | None:
    local = Path(sys.executable).parent / "nats-server"
    return str(local) if local.exists() else shutil.which("nats-server")


@pytest.mark.skipif(_nats_server() is None, reason="nats-server binary not installed")
def test_nats_server_accepts_the_same_files() -> None:
    """Cross-check: everything we ship or test as valid also loads in nats-server (-t)."""
    files = [
        *sorted(SEEDS.glob("*.conf")),
        EXAMPLES / "single.conf",
        *sorted((EXAMPLES / "cluster").glob("*.conf")),
    ]
    binary = _nats_server()
    assert binary is not None
    for path in files:
        proc = subprocess.run([binary, "-t", "-c", str(path)], capture_output=True, timeout=30)
        assert proc.returncode == 0, (path, proc.stderr.decode())
