"""Running the nats.js scripts of ``tests/js`` from pytest (one server or a cluster).

``install()`` puts the pinned ``nats`` npm package into ``tests/js/node_modules`` (once;
reused while the lockfile is unchanged) and returns the ``node`` binary; ``run_script()``
runs one script with ``NATS_URL`` (and optionally ``NATS_REPLICAS``) set, failing the test
with the script's TAP output and the servers' log tails when any of its tests failed.

Node is required: CI has it, so a missing ``node`` or ``npm`` fails loudly instead of
skipping.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

JS_DIR = Path(__file__).resolve().parent / "js"
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


def install() -> str:
    """Install the pinned nats.js when needed; return the path of ``node``."""
    node = _require("node")
    npm = _require("npm")
    # Test workers running in parallel (pytest-xdist) may all ask at once: one installs,
    # the others wait for it and find the tree current.
    with (JS_DIR / ".install.lock").open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        _install_locked(npm)
    version = _installed_nats_version()
    assert version is not None and version.startswith("2."), f"nats.js {version} installed"
    return node


def _install_locked(npm: str) -> None:
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


def run_script(
    node: str,
    script: str,
    url: str,
    server_logs: Callable[[], str],
    *,
    replicas: int = 1,
) -> None:
    """Run one script against ``url``; every stream, bucket and object store it creates
    gets ``replicas`` replicas. ``server_logs`` is called only to explain a failure."""
    env = {
        **os.environ,
        "NATS_URL": url,
        "NATS_REPLICAS": str(replicas),
        "NO_COLOR": "1",
    }
    try:
        proc = subprocess.run(
            [node, "--test-reporter=tap", script],
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
            f"--- server logs ---\n{server_logs()}"
        )
    failed = [line for line in proc.stdout.splitlines() if line.startswith("not ok")]
    assert proc.returncode == 0 and not failed, (
        f"{script} exited {proc.returncode}; failed: {failed}\n--- output ---\n{proc.stdout}\n"
        f"--- stderr ---\n{proc.stderr}\n--- server logs ---\n{server_logs()}"
    )
    # A script that ran no test proves nothing.
    assert "# pass 0" not in proc.stdout and "# pass " in proc.stdout, proc.stdout
