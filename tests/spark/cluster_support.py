"""A real 3-node JetStream cluster on loopback, for the connector's fault tests: jetraft
servers (``kind="jetraft"``) or nats-server ones (``kind="nats-server"``), from the same
config text (server_name, a cluster block with every route, JetStream, monitoring), so that
the connector's promises about lagging replicas and moving stream leaders are checked
against both. Every wait here polls a condition with a bounded deadline; every signal goes
to a pid this module started.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import nats
import nats.errors
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig
from nats.js.errors import ServiceUnavailableError

from tests.spark.support import _free_port, _nats_server_binary, end_process, file_tail, run

T = TypeVar("T")
CLUSTER_NAME = "jrspark"
KINDS = ("nats-server", "jetraft")


@dataclass
class Node:
    """One server process: fixed ports, config file and store dir across restarts."""

    index: int
    base: Path
    kind: str = "nats-server"
    port: int = field(default_factory=_free_port)
    cluster_port: int = field(default_factory=_free_port)
    http_port: int = field(default_factory=_free_port)
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def name(self) -> str:
        return f"n{self.index + 1}"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def conf_path(self) -> Path:
        return self.base / f"{self.name}.conf"

    @property
    def log_path(self) -> Path:
        return self.base / f"{self.name}.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def serving(self) -> bool:
        """Running and not paused: it can answer requests."""
        return self.running and not self.paused

    def write_config(self, route_ports: list[int]) -> None:
        routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in route_ports)
        store = self.base / self.name
        self.conf_path.write_text(
            f"server_name: {self.name}\n"
            f'listen: "127.0.0.1:{self.port}"\n'
            f'http: "127.0.0.1:{self.http_port}"\n'
            f'jetstream {{ store_dir: "{store}" }}\n'
            f"cluster {{\n"
            f"  name: {CLUSTER_NAME}\n"
            f'  listen: "127.0.0.1:{self.cluster_port}"\n'
            f"  routes: [{routes}]\n"
            f"}}\n"
        )

    def start(self) -> None:
        assert not self.running, f"{self.name} is already running"
        log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        try:
            self.proc = subprocess.Popen(
                self._command(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        self.paused = False

    def _command(self) -> list[str]:
        if self.kind == "jetraft":
            return [sys.executable, "-m", "jetraft", "server", "-c", str(self.conf_path)]
        return [_nats_server_binary(), "-c", str(self.conf_path)]

    def signal(self, sig: int) -> None:
        assert self.proc is not None and self.proc.poll() is None, f"{self.name} is not running"
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush; the store is recovered on restart."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(15)
        self.proc, self.paused = None, False

    def stop(self) -> None:
        """SIGTERM (after SIGCONT if paused), SIGKILL if it does not exit in time."""
        if self.proc is None:
            return
        if self.paused and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        end_process(self.proc)
        self.proc, self.paused = None, False

    def monitor(self, path: str) -> dict[str, Any] | None:
        """A monitoring endpoint's JSON, None if the node does not answer."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.http_port}{path}", timeout=2
            ) as resp:
                body: dict[str, Any] = json.loads(resp.read())
                return body
        except (OSError, ValueError):
            return None

    def log_tail(self) -> str:
        return file_tail(self.log_path, 2000)


def wait_until(what: str, cond: Callable[[], bool], timeout_s: float, step_s: float = 0.1) -> None:
    """Poll ``cond`` until it holds; AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if cond():
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(step_s)


async def _request(url: str, subject: str, body: bytes, timeout_s: float) -> dict[str, Any] | None:
    """One JSON API request through one node; None on any transport failure or no answer."""
    try:
        nc = await nats.connect(url, allow_reconnect=False, connect_timeout=2)
    except Exception:
        return None
    try:
        msg = await nc.request(subject, body, timeout=timeout_s)
        reply: dict[str, Any] = json.loads(msg.data) if msg.data else {}
        return reply
    except (nats.errors.Error, ValueError):
        return None
    finally:
        await nc.close()


class NatsCluster:
    """Three nodes (n1..n3) of one kind forming one JetStream cluster on 127.0.0.1."""

    def __init__(self, base: Path, size: int = 3, kind: str = "nats-server") -> None:
        assert kind in KINDS, kind
        base.mkdir(parents=True, exist_ok=True)
        self.kind = kind
        self.nodes = [Node(i, base, kind) for i in range(size)]
        route_ports = [n.cluster_port for n in self.nodes]
        for node in self.nodes:
            node.write_config(route_ports)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> None:
        for node in self.nodes:
            node.start()
        self.wait_ready(timeout_s)

    def stop_all(self) -> None:
        for node in self.nodes:
            node.stop()

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Every running node agrees on a meta leader and answers $JS.API.INFO."""

        def ready() -> bool:
            for node in self.nodes:
                exited = node.proc is not None and node.proc.poll() is not None
                assert not exited, f"{node.name} exited:\n{node.log_tail()}"
            live = [n for n in self.nodes if n.serving]
            leaders = {self.meta_leader(n) for n in live}
            if len(leaders) != 1 or None in leaders:
                return False
            return all(self._js_info_ok(n) for n in live)

        wait_until("the meta leader and $JS.API.INFO on every node", ready, timeout_s, 0.2)

    def meta_leader(self, node: Node) -> str | None:
        jsz = node.monitor("/jsz")
        meta = (jsz or {}).get("meta_cluster") or {}
        leader = meta.get("leader")
        return str(leader) if leader else None

    def _js_info_ok(self, node: Node) -> bool:
        reply = run(_request(node.url, "$JS.API.INFO", b"", 2.0))
        return reply is not None and "error" not in reply

    def kill(self, index: int) -> None:
        self.nodes[index].kill()

    def stop(self, index: int) -> None:
        self.nodes[index].stop()

    def restart(self, index: int, timeout_s: float = 60.0) -> None:
        """Start a stopped or killed node again (same ports and store) and wait until ready."""
        node = self.nodes[index]
        node.stop()
        node.start()
        self.wait_ready(timeout_s)

    def pause(self, index: int) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing (a stalled replica)."""
        node = self.nodes[index]
        node.signal(signal.SIGSTOP)
        node.paused = True

    def resume(self, index: int) -> None:
        node = self.nodes[index]
        node.signal(signal.SIGCONT)
        node.paused = False

    # -- addressing -----------------------------------------------------------------------

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def servers(self, exclude: tuple[int, ...] = ()) -> str:
        """The connector's ``servers`` option: every node but the excluded ones."""
        return ",".join(n.url for n in self.nodes if n.index not in exclude)

    def live_url(self, avoid: tuple[int, ...] = ()) -> str:
        for node in self.nodes:
            if node.serving and node.index not in avoid:
                return node.url
        raise AssertionError("no serving node")

    def index_of(self, name: str) -> int:
        return next(n.index for n in self.nodes if n.name == name)

    # -- streams --------------------------------------------------------------------------

    def call(self, fn: Callable[[Any, Any], Awaitable[T]], avoid: tuple[int, ...] = ()) -> T:
        """Run ``fn(nc, js)`` with a client connected to one serving node."""

        async def _do() -> T:
            nc = await nats.connect(self.live_url(avoid), allow_reconnect=False)
            try:
                return await fn(nc, nc.jetstream(timeout=10))
            finally:
                await nc.close()

        return run(_do())

    def stream_info(self, stream: str, timeout_s: float = 2.0) -> dict[str, Any] | None:
        """STREAM.INFO (answered by the stream leader); None when no answer or an error."""
        for node in self.nodes:
            if not node.serving:
                continue
            subject = f"$JS.API.STREAM.INFO.{stream}"
            reply = run(_request(node.url, subject, b"", timeout_s))
            if reply is not None and "error" not in reply:
                return reply
        return None

    def stream_leader(self, stream: str) -> str | None:
        """The name of the node leading the stream, as STREAM.INFO reports it (None while
        there is none; a short timeout, since this is polled while leaders move)."""
        info = self.stream_info(stream, 0.5)
        leader = ((info or {}).get("cluster") or {}).get("leader")
        return str(leader) if leader else None

    def leader_index(self, stream: str, timeout_s: float = 30.0) -> int:
        return self.wait_leader(stream, timeout_s=timeout_s)

    def wait_leader(self, stream: str, avoid: int | None = None, timeout_s: float = 30.0) -> int:
        """The index of the stream's leader, once one (other than node ``avoid``) is reported."""
        found: list[int] = []

        def known() -> bool:
            leader = self.stream_leader(stream)
            if leader is not None and self.index_of(leader) != avoid:
                found.append(self.index_of(leader))
            return bool(found)

        wait_until(f"a leader for stream {stream} (not node {avoid})", known, timeout_s)
        return found[0]

    def wait_stream_current(self, stream: str, timeout_s: float = 60.0) -> None:
        """A leader, and every other replica reported current (caught up) by it."""

        def current() -> bool:
            info = self.stream_info(stream)
            cluster = (info or {}).get("cluster") or {}
            replicas = cluster.get("replicas") or []
            size = info["config"].get("num_replicas", 1) if info else 0
            return (
                bool(cluster.get("leader"))
                and len(replicas) == size - 1
                and all(r.get("current") and not r.get("offline") for r in replicas)
            )

        wait_until(f"stream {stream} to have a leader and current replicas", current, timeout_s)

    def step_down(self, stream: str, timeout_s: float = 30.0) -> str:
        """Ask the stream leader to step down; returns the new leader once one is reported."""
        old = None
        deadline = time.monotonic() + timeout_s
        while old is None:
            old = self.stream_leader(stream)
            if old is None:
                assert time.monotonic() < deadline, f"stream {stream} has no leader to step down"
                time.sleep(0.1)
        subject = f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}"
        while True:
            reply = run(_request(self.live_url(), subject, b"", 2.0))
            if reply is not None and reply.get("success"):
                break
            assert time.monotonic() < deadline, f"stepdown of {stream} refused: {reply}"
            time.sleep(0.1)
        new: list[str] = []

        def moved() -> bool:
            leader = self.stream_leader(stream)
            if leader is not None and leader != old:
                new.append(leader)
                return True
            return False

        left_s = max(1.0, deadline - time.monotonic())
        wait_until(f"a new leader for {stream} (was {old})", moved, left_s)
        return new[0]


def create_stream(cluster: NatsCluster, name: str, subjects: list[str], **cfg: Any) -> None:
    """An R3 file stream (overridable), waiting until every replica is current."""
    cfg.setdefault("num_replicas", 3)

    async def _do(nc: Any, js: Any) -> None:
        await js.add_stream(StreamConfig(name=name, subjects=subjects, **cfg))

    cluster.call(_do)
    cluster.wait_stream_current(name)


ACK_WAIT_S = 10.0


def publish(
    cluster: NatsCluster, items: list[tuple[str, bytes]], avoid: tuple[int, ...] = ()
) -> list[int]:
    """Publish through one serving node (not in ``avoid``) and return the sequences.

    Each message carries a Nats-Msg-Id, and the ones without a positive PubAck (a leader
    moving, a replica stalled) are sent again with the same id: each is stored once.
    """
    tag = uuid.uuid4().hex[:12]

    async def _do(nc: Any, js: Any) -> list[int]:
        seqs: dict[int, int] = {}
        todo = list(range(len(items)))
        for _ in range(20):
            failed: list[int] = []
            for start in range(0, len(todo), 1000):
                part = todo[start : start + 1000]
                futures = []
                for i in part:
                    subject, data = items[i]
                    hdrs = {"Nats-Msg-Id": f"{tag}-{i}"}
                    futures.append(await js.publish_async(subject, data, headers=hdrs))
                # A PubAck may never come (a publish through a server that just restarted,
                # a leader moving): nats-py's futures wait forever, so each gets a deadline
                # and the message is sent again with its id.
                acks = await asyncio.gather(
                    *(asyncio.wait_for(f, ACK_WAIT_S) for f in futures), return_exceptions=True
                )
                for i, ack in zip(part, acks, strict=True):
                    if isinstance(ack, BaseException):
                        failed.append(i)
                    else:
                        seqs[i] = ack.seq
            if not failed:
                return [seqs[i] for i in range(len(items))]
            todo = failed
            await asyncio.sleep(0.5)
        raise AssertionError(f"{len(todo)} messages never got a PubAck")

    return cluster.call(_do, avoid)


@dataclass(frozen=True)
class Stored:
    seq: int
    subject: str
    data: bytes
    msg_id: str | None


def stored_messages(cluster: NatsCluster, stream: str, avoid: tuple[int, ...] = ()) -> list[Stored]:
    """Every message of a stream, read with nats-py (not the connector): a pull consumer on the
    whole stream, fetched until it has delivered as many as STREAM.INFO counts."""

    async def _do(nc: Any, js: Any) -> list[Stored]:
        info = await js.stream_info(stream)
        expected = info.state.messages
        config = ConsumerConfig(
            ack_policy=AckPolicy.NONE, mem_storage=True, num_replicas=1, inactive_threshold=60
        )
        subjects = info.config.subjects or [">"]
        filt = subjects[0] if len(subjects) == 1 else ">"
        sub = await js.pull_subscribe(filt, stream=stream, config=config)
        out: list[Stored] = []
        try:
            for _ in range(expected // 100 + 50):
                if len(out) >= expected:
                    break
                try:
                    msgs = await sub.fetch(1000, timeout=5)
                except TimeoutError:
                    continue
                except ServiceUnavailableError:
                    # No responders: the new consumer's interest has not yet crossed the route
                    # to the server this client sits on (nats-server shows it too, right after
                    # a step-down). The loop is bounded; a later fetch finds it.
                    await asyncio.sleep(0.1)
                    continue
                for m in msgs:
                    msg_id = (m.headers or {}).get("Nats-Msg-Id")
                    seq = m.metadata.sequence.stream
                    out.append(Stored(seq, m.subject, m.data, msg_id))
        finally:
            await sub.unsubscribe()
            await js.delete_consumer(stream, config.name)
        return out

    return cluster.call(_do, avoid)
