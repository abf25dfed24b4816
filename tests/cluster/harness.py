"""Real jetraft clusters on loopback: one server process per node, configs shaped like the
seeds' (server_name n<i>-c1, cluster C1, the $SYS account with the seeds' bcrypt user), each
node on its own loopback address so that a node's routes can be told apart by address.

Optionally every node's route listener sits behind a ``RouteProxy`` (the address the other
nodes dial and the one it advertises), which the tests cut and heal to partition nodes.
Every wait polls a condition with a deadline; every signal goes to a pid started here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import nats

from tests.cluster.proxy import RouteProxy
from tests.ports import free_port, free_ports

T = TypeVar("T")

SRC = Path(__file__).resolve().parents[2] / "src"
SYS_USER = "admin"
SYS_PASSWORD = "a very long s3cr3t! password"
SYS_HASH = "$2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm"
CLUSTER = "C1"


async def wait_until(
    check: Callable[[], Awaitable[T | None] | T | None],
    timeout_s: float = 20.0,
    what: str = "",
    interval_s: float = 0.05,
) -> T:
    """Poll ``check`` (sync or async) until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout_s
    last_exc: BaseException | None = None
    while True:
        try:
            got = check()
            if asyncio.iscoroutine(got) or isinstance(got, asyncio.Future):
                got = await got
            if got:
                return got  # type: ignore[return-value]
        except Exception as exc:  # keep polling; report the last failure on timeout
            last_exc = exc
        if time.monotonic() > deadline:
            detail = f" (last error: {last_exc!r})" if last_exc else ""
            raise AssertionError(f"timed out waiting for {what or check}{detail}")
        await asyncio.sleep(interval_s)


async def stream_leader(nc: nats.NATS, stream: str, timeout_s: float = 30.0) -> str:
    """The name of the stream's leader, once its info names one (errors while there is
    none, or while the cluster settles, are polled through)."""

    async def known() -> str | None:
        info = await nc.jetstream().stream_info(stream)
        return info.cluster.leader if info.cluster and info.cluster.leader else None

    return await wait_until(known, timeout_s, f"a leader for {stream}")


@dataclass
class Node:
    index: int  # 1-based, as in the seeds' n1-c1
    base: Path
    jetstream: bool = True
    extra: str = ""  # config text appended (tags, limits...)
    name_override: str = ""
    cluster_name: str = CLUSTER
    cluster_extra: str = ""  # config text inside the cluster block
    js_extra: str = ""  # config text inside the jetstream block
    host: str = ""
    port: int = 0
    cluster_port: int = 0
    http_port: int = 0
    proxy: RouteProxy | None = None
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    starts: int = 0

    def __post_init__(self) -> None:
        self.host = self.host or f"127.0.0.{10 + self.index}"
        client, route, http = free_ports(self.host, 3)
        self.port = self.port or client
        self.cluster_port = self.cluster_port or route
        self.http_port = self.http_port or http

    @property
    def name(self) -> str:
        return self.name_override or f"n{self.index}-c1"

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def sys_url(self) -> str:
        # Verbatim, not percent-encoded: nats-py sends the URL's password as written.
        return f"nats://{SYS_USER}:{SYS_PASSWORD}@{self.host}:{self.port}"

    @property
    def route_url(self) -> str:
        """Where the other nodes dial this one (its proxy when it has one)."""
        if self.proxy is not None:
            return f"nats-route://{self.proxy.host}:{self.proxy.port}"
        return f"nats-route://{self.host}:{self.cluster_port}"

    @property
    def store_dir(self) -> Path:
        return self.base / f"node{self.index}" / "storage"

    @property
    def conf_path(self) -> Path:
        return self.base / f"node{self.index}.conf"

    @property
    def log_path(self) -> Path:
        return self.base / f"node{self.index}.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def config_text(self, routes: list[str]) -> str:
        route_lines = "\n".join(f"    {r}" for r in routes)
        js = (
            f"jetstream {{\n   store_dir={self.store_dir}\n{self.js_extra}}}\n"
            if self.jetstream
            else ""
        )
        advertise = ""
        if self.proxy is not None:
            advertise = f"  advertise: {self.proxy.host}:{self.proxy.port}\n"
        # The seeds' shape: server_name, listen, the $SYS account, jetstream, cluster.
        return (
            f"server_name={self.name}\n"
            f"listen={self.host}:{self.port}\n"
            f"http: {self.host}:{self.http_port}\n"
            "accounts {\n"
            "  $SYS {\n"
            "    users = [\n"
            f'      {{ user: "{SYS_USER}",\n'
            f'        pass: "{SYS_HASH}"\n'
            "      }\n"
            "    ]\n"
            "  }\n"
            "}\n"
            f"{js}"
            "cluster {\n"
            f"  name: {self.cluster_name}\n"
            f"  listen: {self.host}:{self.cluster_port}\n"
            f"{advertise}"
            f"{self.cluster_extra}"
            "  routes: [\n"
            f"{route_lines}\n"
            "  ]\n"
            "}\n"
            f"{self.extra}"
        )

    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start {self.starts} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jetraft", "server", "-c", str(self.conf_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        self.paused = False

    def signal(self, sig: int) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            if self.paused:
                self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP: the process is alive but does nothing; its sockets stay open."""
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.paused:
            self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def http(self, path: str) -> dict[str, Any]:
        url = f"http://{self.host}:{self.http_port}{path}"
        with urllib.request.urlopen(url, timeout=2) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class Cluster:
    base: Path
    nodes: list[Node] = field(default_factory=list)
    proxies: bool = False

    @classmethod
    def create(
        cls,
        base: Path,
        size: int,
        *,
        proxies: bool = False,
        jetstream: Callable[[int], bool] | None = None,
        extra: Callable[[int], str] | None = None,
    ) -> Cluster:
        cl = cls(base, proxies=proxies)
        for i in range(1, size + 1):
            node = Node(
                i,
                base,
                jetstream=jetstream(i) if jetstream else True,
                extra=extra(i) if extra else "",
            )
            if proxies:
                node.proxy = RouteProxy(
                    node.host, free_port(node.host), node.host, node.cluster_port
                )
            cl.nodes.append(node)
        return cl

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def routes_for(self, node: Node) -> list[str]:
        return [o.route_url for o in self.nodes if o is not node]

    def write_configs(self, routes: Callable[[Node], list[str]] | None = None) -> None:
        for node in self.nodes:
            node.store_dir.mkdir(parents=True, exist_ok=True)
            node.conf_path.write_text(node.config_text((routes or self.routes_for)(node)))

    async def start(
        self, *, wait: bool = True, routes: Callable[[Node], list[str]] | None = None
    ) -> None:
        for node in self.nodes:
            if node.proxy is not None:
                await node.proxy.start()
        self.write_configs(routes)
        for node in self.nodes:
            node.start()
        if wait:
            await self.wait_mesh()

    async def wait_serving(self, node: Node, timeout_s: float = 30.0) -> None:
        def up() -> bool:
            if not node.running:
                raise AssertionError(f"{node.name} exited:\n{node.log()[-3000:]}")
            try:
                node.http("/healthz?js-server-only=true")  # up, JetStream or not
                return True
            except OSError:
                return False

        await wait_until(up, timeout_s, f"{node.name} to serve")

    async def wait_mesh(self, timeout_s: float = 30.0, nodes: list[Node] | None = None) -> None:
        """Every running node has a route to every other running node."""
        members = [n for n in (nodes or self.nodes) if n.running and not n.paused]
        for node in members:
            await self.wait_serving(node, timeout_s)
        want = {n.name for n in members}

        def meshed() -> bool:
            for node in members:
                got = {r["remote_name"] for r in node.http("/routez")["routes"]}
                if not want - {node.name} <= got:
                    return False
            return True

        await wait_until(meshed, timeout_s, "the full route mesh")

    def stream_messages(self, stream: str, account: str = "$G") -> dict[str, int]:
        """Messages each server's own replica of ``stream`` holds (servers without one are
        left out): what the replicas agree on, read from each server directly."""
        out = {}
        for node in self.nodes:
            if not node.running or node.paused or not node.jetstream:
                continue
            for acc in node.http("/jsz?accounts=1&streams=1").get("account_details", []):
                if acc["name"] != account:
                    continue
                for sd in acc.get("stream_detail", []):
                    if sd["name"] == stream:
                        out[node.name] = sd["state"]["messages"]
        return out

    def meta_leader(self, nodes: list[Node] | None = None) -> str:
        """The meta leader all running JetStream nodes agree on ("" if they do not)."""
        seen = set()
        for node in nodes or self.nodes:
            if not node.running or node.paused or not node.jetstream:
                continue
            seen.add(node.http("/jsz").get("meta_cluster", {}).get("leader", ""))
        return seen.pop() if len(seen) == 1 else ""

    async def wait_jetstream(self, timeout_s: float = 30.0, nodes: list[Node] | None = None) -> str:
        """Wait until the running JetStream nodes agree on a meta leader; return it."""
        return await wait_until(lambda: self.meta_leader(nodes), timeout_s, "a meta leader")

    async def connect_system(self, node: Node, **kwargs: Any) -> nats.NATS:
        """A client of the system account ($SYS), with the seeds' admin user."""
        kwargs.setdefault("user", SYS_USER)
        kwargs.setdefault("password", SYS_PASSWORD)
        return await self.connect(node, **kwargs)

    async def connect(self, node: Node, **kwargs: Any) -> nats.NATS:
        kwargs.setdefault("allow_reconnect", False)
        kwargs.setdefault("connect_timeout", 3)
        return await nats.connect(node.url, **kwargs)

    async def restart(self, node: Node) -> None:
        node.stop()
        node.start()
        await self.wait_serving(node)

    def partition(self, *groups: list[Node]) -> None:
        """Cut every route between nodes of different groups (silently: bytes are held)."""
        for i, a in enumerate(groups):
            for b in groups[i + 1 :]:
                for x in a:
                    for y in b:
                        assert x.proxy is not None and y.proxy is not None, "needs proxies"
                        x.proxy.cut({y.host})
                        y.proxy.cut({x.host})

    def heal(self) -> None:
        for node in self.nodes:
            if node.proxy is not None:
                node.proxy.heal()

    async def close(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.stop()
        for node in self.nodes:
            if node.proxy is not None:
                await node.proxy.close()

    def logs(self) -> str:
        return "\n".join(f"----- {n.name} -----\n{n.log()[-4000:]}" for n in self.nodes)
