"""Helpers for the stream-side JetStream integration tests (raw API calls, servers that can be
restarted on the same store directory, subprocess servers for crash tests)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats

from tests.integration.jetstream.consumer_support import VS_NATS
from tests.ports import free_port

__all__ = ["VS_NATS", "ProcServer", "api", "err", "free_port", "wait_for"]


async def api(nc: nats.NATS, subject: str, body: Any = None, timeout: float = 2.0) -> Any:
    """A raw ``$JS.API.<subject>`` request; returns the decoded JSON answer."""
    if body is None:
        data = b""
    elif isinstance(body, bytes):
        data = body
    else:
        data = json.dumps(body).encode()
    msg = await nc.request("$JS.API." + subject, data, timeout=timeout)
    return json.loads(msg.data)


def err(resp: dict[str, Any]) -> tuple[int, int, str]:
    e = resp["error"]
    return e["code"], e["err_code"], e["description"]


async def wait_for(
    check: Callable[[], Awaitable[bool]], timeout_s: float = 5.0, interval_s: float = 0.02
) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval_s)


class ProcServer:
    """``python -m jetraft server -c FILE`` in a subprocess (for SIGKILL tests)."""

    def __init__(self, tmp: Path, conf: str) -> None:
        self.port = free_port()
        self.conf_path = tmp / f"server-{self.port}.conf"
        self.conf_path.write_text(f"listen: 127.0.0.1:{self.port}\n{conf}\n")
        self.log_path = tmp / f"server-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self, timeout_s: float = 20.0) -> None:
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[3] / "src")
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jetraft", "server", "-c", str(self.conf_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited: {self.log_path.read_text()[-2000:]}")
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("server did not start") from None
                await asyncio.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")
