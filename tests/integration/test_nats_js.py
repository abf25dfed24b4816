"""nats.js (the `nats` npm package, v2) against a jetraft server.

Each ``tests/js/*.mjs`` script is a small node:test file written the way a nats.js user
writes code (core pub/sub, JetStream streams and consumers, KV, object store). This wrapper
installs the package once per session into ``tests/js/node_modules``, starts one jetraft
server subprocess with JetStream on loopback, and runs every script with ``NATS_URL`` set,
asserting exit status 0 and showing the script's TAP output (and the server's log tail) on
failure.

Node is required: CI has it, so a missing ``node`` or ``npm`` fails loudly instead of
skipping. To check that a script itself is right, run it against the real nats-server:
``NATSJS_SERVER=/path/to/nats-server pytest tests/integration/test_nats_js.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

JS_DIR = Path(__file__).resolve().parent.parent / "js"
SCRIPTS = sorted(p.name for p in JS_DIR.glob("*.mjs") if p.name != "lib.mjs")
SCRIPT_TIMEOUT_S = 150
INSTALL_TIMEOUT_S = 300


def _require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(
            f"`{tool}` is not on PATH: the nats.js compatibility tests need Node.js (>= 18) "
            "and npm. Install them (CI images have them); these tests never skip.",
            pytrace=False,
        )
    return path


def _installed_nats_version() -> str | None:
    pkg = JS_DIR / "node_modules" / "nats" / "package.json"
    if not pkg.is_file():
        return None
    return str(json.loads(pkg.read_text())["version"])


def _install_is_current() -> bool:
    # npm writes node_modules/.package-lock.json on every install; when it is newer than
    # the lockfile the cached tree matches what `npm ci` would produce.
    hidden = JS_DIR / "node_modules" / ".package-lock.json"
    lock = JS_DIR / "package-lock.json"
    if _installed_nats_version() is None or not hidden.is_file():
        return False
    return not lock.is_file() or hidden.stat().st_mtime >= lock.stat().st_mtime


@pytest.fixture(scope="session")
def natsjs_installed() -> str:
    """Install the pinned nats.js once per session (reused across sessions); return node."""
    node = _require("node")
    npm = _require("npm")
    if not _install_is_current():
        verb = "ci" if (JS_DIR / "package-lock.json").is_file() else "install"
        proc = subprocess.run(
            [npm, verb, "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=JS_DIR,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
        )
        if proc.returncode != 0:
            pytest.fail(f"npm {verb} failed in {JS_DIR}:\n{proc.stdout}\n{proc.stderr}")
    version = _installed_nats_version()
    assert version is not None and version.startswith("2."), f"nats.js {version} installed"
    return node


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


@pytest.mark.parametrize("script", SCRIPTS)
def test_nats_js_script(natsjs_installed: str, js_server: RunningServer, script: str) -> None:
    env = {**os.environ, "NATS_URL": js_server.url, "NO_COLOR": "1"}
    try:
        proc = subprocess.run(
            [natsjs_installed, "--test-reporter=tap", script],
            cwd=JS_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        pytest.fail(
            f"{script} did not finish in {SCRIPT_TIMEOUT_S}s\n--- output ---\n{out}\n"
            f"--- server log tail ---\n{js_server.log_tail()}"
        )
    failed = [line for line in proc.stdout.splitlines() if line.startswith("not ok")]
    assert proc.returncode == 0 and not failed, (
        f"{script} exited {proc.returncode}; failed: {failed}\n--- output ---\n{proc.stdout}\n"
        f"--- stderr ---\n{proc.stderr}\n--- server log tail ---\n{js_server.log_tail()}"
    )
    assert js_server.proc.poll() is None, f"server died during {script}:\n{js_server.log_tail()}"
    # A script that ran no test proves nothing.
    assert "# pass 0" not in proc.stdout and "# pass " in proc.stdout, proc.stdout
