"""3-server clusters of jetraft or of nats-server on loopback, for the cluster benchmarks.

Both servers get the same configuration text (server_name, listen, jetstream store_dir,
cluster name/listen/routes to the two others); only the binary differs, plus
``sync_interval: always`` in the jetstream block for the durable nats-server comparison.
Every run picks its own loopback address (a random 127.x.y.z) and free ports on it, so it
never collides with tests or other benchmarks running at the same time. Only processes
started here are signalled, by pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import nats
from nats.aio.client import Client as NATS

from benchmarks.common import free_port, nats_server_binary
from benchmarks.js_publish import Conn

# jetraft fsyncs before every PubAck; nats-server's default syncs every 2 minutes (lazy);
# "nats-server-always" fsyncs every write (the durable comparison).
KINDS = ("jetraft", "nats-server", "nats-server-always")
CLUSTER_NAME = "BENCH"


# jetraft servers run from compiled bytecode, as an installed package does (pip compiles
# every module at install time). Without it, in an environment that sets
# PYTHONDONTWRITEBYTECODE (or runs from a source tree it may not write to), every server
# start compiles all of jetraft again: about 0.4 s of CPU per server, most of what a start
# costs. The bytecode goes to a cache outside the source tree (PYTHONPYCACHEPREFIX).
# JSCLUSTER_SOURCE=1 starts them from source instead, to measure that case.
PYCACHE_DIR = os.path.join(tempfile.gettempdir(), f"jetraft-bench-pycache-{os.getuid()}")
_compiled = False


def jetraft_env() -> dict[str, str]:
    """The environment of a jetraft server process (see PYCACHE_DIR)."""
    global _compiled
    env = dict(os.environ)
    if env.get("JSCLUSTER_SOURCE") == "1":
        return env
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = PYCACHE_DIR
    if not _compiled:
        import jetraft

        pkg = os.path.dirname(jetraft.__file__)
        subprocess.run([sys.executable, "-m", "compileall", "-q", pkg], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        _compiled = True
    return env


def pick_host() -> str:
    """A loopback address of our own for this run (all of 127.0.0.0/8 is loopback)."""
    rnd = random.SystemRandom()
    return f"127.{rnd.randint(64, 250)}.{rnd.randint(0, 255)}.{rnd.randint(2, 250)}"


@dataclass
class ClusterNode:
    name: str
    host: str
    port: int
    cluster_port: int
    store_dir: str
    conf_path: str
    log_path: str
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def addr(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


@dataclass
class BenchCluster:
    """A cluster of ``kind`` (one of KINDS) with its configs written; ``start`` spawns it."""

    kind: str
    base: str
    nodes: list[ClusterNode] = field(default_factory=list)
    spawned_at: float = 0.0

    @classmethod
    def create(cls, kind: str, size: int = 3, host: str | None = None) -> BenchCluster:
        if kind not in KINDS:
            raise ValueError(f"unknown server kind {kind!r}")
        host = host or pick_host()
        cl = cls(kind, tempfile.mkdtemp(prefix=f"jsclbench-{kind}-"))
        for i in range(1, size + 1):
            d = os.path.join(cl.base, f"n{i}")
            os.makedirs(d)
            cl.nodes.append(
                ClusterNode(
                    name=f"n{i}",
                    host=host,
                    port=free_port(host),
                    cluster_port=free_port(host),
                    store_dir=os.path.join(d, "js"),
                    conf_path=os.path.join(d, "server.conf"),
                    log_path=os.path.join(d, "server.log"),
                )
            )
        for node in cl.nodes:
            with open(node.conf_path, "w") as f:
                f.write(cl.config_text(node))
        return cl

    def config_text(self, node: ClusterNode) -> str:
        routes = "\n".join(
            f"    nats-route://{o.host}:{o.cluster_port}" for o in self.nodes if o is not node
        )
        sync = "  sync_interval: always\n" if self.kind == "nats-server-always" else ""
        return (
            f"server_name: {node.name}\n"
            f"listen: {node.host}:{node.port}\n"
            f'jetstream {{\n  store_dir: "{node.store_dir}"\n{sync}}}\n'
            "cluster {\n"
            f"  name: {CLUSTER_NAME}\n"
            f"  listen: {node.host}:{node.cluster_port}\n"
            f"  routes: [\n{routes}\n  ]\n"
            "}\n"
        )

    def command(self, node: ClusterNode) -> list[str]:
        if self.kind == "jetraft":
            return [sys.executable, "-m", "jetraft", "server", "-c", node.conf_path]
        return [nats_server_binary(), "-c", node.conf_path]

    def spawn(self, node: ClusterNode) -> None:
        with open(node.log_path, "ab") as log:
            env = jetraft_env() if self.kind == "jetraft" else None
            node.proc = subprocess.Popen(
                self.command(node), stdout=log, stderr=subprocess.STDOUT, env=env
            )

    def start(self) -> None:
        if self.kind == "jetraft":
            jetraft_env()  # compiles once, before the clock starts
        self.spawned_at = time.monotonic()
        for node in self.nodes:
            self.spawn(node)

    def node(self, name: str) -> ClusterNode:
        return next(n for n in self.nodes if n.name == name)

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL, to the pid we started: no shutdown code runs."""
        if node.proc is not None and node.proc.poll() is None:
            node.proc.send_signal(signal.SIGKILL)
            node.proc.wait(10)

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.terminate()
        for node in self.nodes:
            if node.proc is None:
                continue
            try:
                node.proc.wait(15)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(10)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    def log_tail(self, chars: int = 2000) -> str:
        out = []
        for node in self.nodes:
            with contextlib.suppress(OSError), open(node.log_path, errors="replace") as f:
                out.append(f"----- {node.name} -----\n{f.read()[-chars:]}")
        return "\n".join(out)

    def check_running(self) -> None:
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} {node.name} exited:\n{self.log_tail()}")

    # -- readiness -------------------------------------------------------------------

    def wait_ready(self, timeout_s: float = 60.0, interval_s: float = 0.01) -> float:
        """Seconds from spawning the processes until every server answered $JS.API.INFO
        without an error (each server polled every ``interval_s`` with raw requests)."""
        deadline = time.monotonic() + timeout_s
        waiting = list(self.nodes)
        while waiting:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.kind} not ready:\n{self.log_tail()}")
            self.check_running()
            waiting = [n for n in waiting if not js_info_ok(n)]
            if waiting:
                time.sleep(interval_s)
        return time.monotonic() - self.spawned_at

    # -- clients and stream placement --------------------------------------------------

    async def connect(self, node: ClusterNode, **kwargs: Any) -> NATS:
        kwargs.setdefault("allow_reconnect", False)
        kwargs.setdefault("connect_timeout", 3)
        return await nats.connect(node.url, **kwargs)

    async def stream_leader(self, js: Any, stream: str, timeout_s: float = 30.0) -> ClusterNode:
        """The server leading ``stream`` once every replica is current (polled)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(Exception):
                info = await js.stream_info(stream)
                cl = info.cluster
                if cl is not None and cl.leader and all(
                    r.current and not r.offline for r in (cl.replicas or [])
                ):
                    return self.node(cl.leader)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.kind}: no settled leader for {stream}")
            await asyncio.sleep(0.05)

    async def consumer_leader(
        self, js: Any, stream: str, consumer: str, timeout_s: float = 30.0
    ) -> ClusterNode:
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(Exception):
                info = await js.consumer_info(stream, consumer)
                if info.cluster is not None and info.cluster.leader:
                    return self.node(info.cluster.leader)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.kind}: no leader for consumer {stream}/{consumer}")
            await asyncio.sleep(0.05)


def js_info_ok(node: ClusterNode, timeout_s: float = 0.25) -> bool:
    """One raw $JS.API.INFO request (no client library, so no reconnect back-off hides
    the moment a server becomes ready): True if it was answered without an error."""
    try:
        conn = Conn(node.port, node.host, timeout_s)
    except OSError:
        return False
    try:
        return b'"error"' not in conn.request("$JS.API.INFO", b"")
    except OSError:
        return False
    finally:
        conn.sock.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process used so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks / os.sysconf("SC_CLK_TCK")
