"""The `jetraft server` command as a user runs it: a config file, flags, signals."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import nats


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(proc: subprocess.Popen[bytes], port: int, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise AssertionError("server did not start listening")


def _start(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "jetraft", "server", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def test_config_file_flags_and_clean_sigint(tmp_path: Path) -> None:
    port = _free_port()
    conf = tmp_path / "s.conf"
    conf.write_text('server_name: "from-file"\nlisten: 127.0.0.1:4999\n')
    # -p overrides the file's port.
    proc = _start(["-c", str(conf), "-p", str(port)])
    try:
        _wait_listening(proc, port)
        nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
        assert nc.connected_server_version.major == 2
        assert nc._server_info["server_name"] == "from-file"
        sub = await nc.subscribe("p")
        await nc.publish("p", b"x")
        assert (await sub.next_msg(timeout=2)).data == b"x"
        await nc.close()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0


def test_bad_config_reports_position_and_exits(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("listen: 127.0.0.1:4222\ncluster {\n  name: C1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "jetraft", "server", "-c", str(conf)],
        capture_output=True,
        timeout=30,
    )
    assert proc.returncode != 0
    err = proc.stderr.decode()
    assert "bad.conf:" in err and "configuration error" in err


def test_sigterm_stops_server(tmp_path: Path) -> None:
    port = _free_port()
    proc = _start(["-a", "127.0.0.1", "-p", str(port)])
    _wait_listening(proc, port)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0


async def test_lame_duck_mode_on_sigusr2(tmp_path: Path) -> None:
    port = _free_port()
    conf = tmp_path / "ldm.conf"
    conf.write_text(
        f"listen: 127.0.0.1:{port}\nlame_duck_grace_period: 1s\nlame_duck_duration: 2s\n"
    )
    proc = _start(["-c", str(conf)])
    try:
        _wait_listening(proc, port)
        import asyncio

        entered = asyncio.Event()

        async def on_ldm() -> None:
            entered.set()

        nc = await nats.connect(
            f"nats://127.0.0.1:{port}", allow_reconnect=False, lame_duck_mode_cb=on_ldm
        )
        proc.send_signal(signal.SIGUSR2)
        await asyncio.wait_for(entered.wait(), 5)
        await nc.close()
        # After the grace period and duration the server exits by itself.
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
