"""nats.js (the `nats` npm package, v2) against a jetraft server.

Each ``tests/js/*.mjs`` script is a small node:test file written the way a nats.js user
writes code (core pub/sub, JetStream streams and consumers, KV, object store). This wrapper
installs the package once per session into ``tests/js/node_modules``, starts one jetraft
server subprocess with JetStream on loopback, and runs every script with ``NATS_URL`` set,
asserting exit status 0 and showing the script's TAP output (and the server's log tail) on
failure.

Node is required (tests/natsjs.py installs and runs; tests/cluster/test_nats_js_cluster.py
runs the same scripts against a 3-server cluster with R3 streams). To check that a script
itself is right, run it against the real nats-server:
``NATSJS_SERVER=/path/to/nats-server pytest tests/integration/test_nats_js.py``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import natsjs
from tests.ports import free_port as _free_port


@pytest.fixture(scope="session")
def natsjs_installed() -> str:
    """Install the pinned nats.js once per session (reused across sessions); return node."""
    return natsjs.install()


@dataclass
class RunningServer:
    url: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, n_chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-n_chars:]


def _wait_listening(server: RunningServer, port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise AssertionError(f"server exited at start:\n{server.log_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise AssertionError(f"server did not listen on {port}:\n{server.log_tail()}")


@pytest.fixture(scope="module")
def js_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One JetStream-enabled server for all scripts (they use unique stream names)."""
    work = tmp_path_factory.mktemp("natsjs")
    port = _free_port()
    flags = ["-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(work / "store")]
    other = os.environ.get("NATSJS_SERVER")
    cmd = [other, *flags] if other else [sys.executable, "-m", "jetraft", "server", *flags]
    log_path = work / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    server = RunningServer(f"nats://127.0.0.1:{port}", proc, log_path)
    try:
        _wait_listening(server, port)
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@pytest.mark.parametrize("script", natsjs.SCRIPTS)
def test_nats_js_script(natsjs_installed: str, js_server: RunningServer, script: str) -> None:
    natsjs.run_script(natsjs_installed, script, js_server.url, js_server.log_tail)
    assert js_server.proc.poll() is None, f"server died during {script}:\n{js_server.log_tail()}"
