"""The `jetraft server` command as a user runs it: a config file, flags, signals."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import nats

from tests.ports import free_port as _free_port


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


# --- the command's edges: config check, busy ports, unusable store, reported version -------

_REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jetraft", "server", *args],
        capture_output=True, text=True, timeout=timeout_s,
    )


def test_check_config_reports_and_exits(tmp_path: Path) -> None:
    port = _free_port()
    good = tmp_path / "good.conf"
    good.write_text(f"listen: 127.0.0.1:{port}\njetstream {{ store_dir: {tmp_path / 'js'} }}\n")
    for flag in ("-t", "--test"):
        proc = _run([flag, "-c", str(good)])
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.strip() == f"jetraft: configuration file {good} is valid"
    assert not (tmp_path / "js").exists()  # checked only: nothing started, nothing created
    example = _REPO / "examples" / "single.conf"
    assert _run(["-t", "-c", str(example)]).returncode == 0
    bad = tmp_path / "bad.conf"
    bad.write_text("listen: 127.0.0.1:4222\ncluster {\n  name: C1\n")
    proc = _run(["-t", "-c", str(bad)])
    assert proc.returncode == 1 and "bad.conf:4:" in proc.stderr and "Traceback" not in proc.stderr
    # As nats-server's check, a field the server would not use fails it too.
    odd = tmp_path / "odd.conf"
    odd.write_text("listen: 127.0.0.1:4222\nfoo: 1\n")
    proc = _run(["-t", "-c", str(odd)])
    assert proc.returncode == 1 and "odd.conf:2:1: unknown field 'foo'" in proc.stderr
    proc = _run(["-t"])
    assert proc.returncode == 1 and "must specify [-c, --config]" in proc.stderr


def test_a_busy_port_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cases = {
            "client connections": ["-p", str(port)],
            "monitoring": ["-p", "-1", "-m", str(port)],
            "routes": ["-p", "-1", "--cluster", f"nats://127.0.0.1:{port}", "--cluster_name", "X"],
        }
        for what, flags in cases.items():
            proc = _run(["-a", "127.0.0.1", *flags])
            assert proc.returncode == 1, proc.stderr
            assert "Traceback" not in proc.stderr
            errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("jetraft:")]
            assert errors == [
                f"jetraft: can't listen for {what} on 127.0.0.1:{port}: address already in use"
            ]


def test_an_unusable_store_dir_stops_the_start(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    cases = {
        "/proc/jetraft-nope": "Can't start JetStream: could not create storage directory - "
        "mkdir /proc/jetraft-nope: no such file or directory",
        str(a_file): "Can't start JetStream: storage directory is not a directory",
    }
    for store, message in cases.items():
        proc = _run(["-a", "127.0.0.1", "-p", "-1", "-js", "-sd", store])
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert f"jetraft: {message}" in proc.stderr.splitlines()


async def test_reported_version_is_the_feature_level_implemented(tmp_path: Path) -> None:
    """INFO and /varz say 2.11 (JetStream API level 1), so clients do not use 2.12 features
    jetraft refuses; jetraft's own version stays visible in ``go``."""
    import json
    import urllib.request

    import jetraft

    port, http_port = _free_port(), _free_port()
    proc = _start(["-a", "127.0.0.1", "-p", str(port), "-m", str(http_port), "-js",
                   "-sd", str(tmp_path / "js")])
    try:
        _wait_listening(proc, port)
        nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
        version = nc.connected_server_version
        assert (version.major, version.minor) == (2, 11)
        assert nc._server_info["go"] == f"jetraft {jetraft.__version__}"
        reported = nc._server_info["version"]
        info = json.loads((await nc.request("$JS.API.INFO", b"", timeout=5)).data)
        assert info["api"]["level"] == 1
        # What 2.12 would promise: atomic batch publish. jetraft says it does not have it.
        create = {"name": "ATOMIC", "subjects": ["a"], "allow_atomic": True}
        reply = await nc.request("$JS.API.STREAM.CREATE.ATOMIC", json.dumps(create).encode(),
                                 timeout=5)
        assert "not supported" in json.loads(reply.data)["error"]["description"]
        await nc.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/varz", timeout=5) as r:
            varz = json.loads(r.read())
        assert varz["version"] == reported
        assert varz["go"] == f"jetraft {jetraft.__version__}"
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0


async def test_trace_log_to_a_log_file_with_a_pid_file(tmp_path: Path) -> None:
    """``trace: true`` writes each operation a client sends and each protocol frame the
    server answers with (nats.js's own tests count the ``[SUB ...]`` lines); ``log_file``
    takes the log instead of standard error, ``logtime: false`` drops the time, and
    ``pid_file`` holds the process id."""
    port = _free_port()
    log_file, pid_file = tmp_path / "server.log", tmp_path / "server.pid"
    conf = tmp_path / "trace.conf"
    conf.write_text(
        f"listen: 127.0.0.1:{port}\ntrace: true\nlogtime: false\n"
        f'log_file: "{log_file}"\npid_file: "{pid_file}"\n'
    )
    proc = _start(["-c", str(conf)])
    try:
        _wait_listening(proc, port)
        assert pid_file.read_text() == str(proc.pid)
        nc = await nats.connect(
            f"nats://127.0.0.1:{port}", user="u", password="hidden", allow_reconnect=False
        )
        sub = await nc.subscribe("foo", queue="q")
        await nc.publish("foo", b"hello", headers={"K": "v"})
        await sub.next_msg(timeout=2)
        await sub.unsubscribe()
        await nc.flush()
        await nc.close()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
    assert proc.stderr is not None and b"[TRC]" not in proc.stderr.read()
    lines = log_file.read_text().splitlines()
    traced = [line.split("] ", 1)[1] for line in lines if "[TRC]" in line]
    assert all(line.startswith(f"[{proc.pid}] [") for line in lines)  # no time
    ops = [t.split(" - ", 2)[2] for t in traced]
    assert ops[0].startswith("<<- [CONNECT {") and '"pass":"[REDACTED]"' in ops[0]
    assert "hidden" not in log_file.read_text()
    hdr = len(b"NATS/1.0\r\nK: v\r\n\r\n")
    for op in ("<<- [SUB foo q 1]", "<<- [PING]", "->> [PONG]",
               f"<<- [HPUB foo {hdr} {hdr + 5}]", f"->> [HMSG foo 1 {hdr} {hdr + 5}]",
               "<<- [UNSUB 1]"):  # fmt: skip
        assert op in ops, (op, ops)
    assert ops[ops.index(f"<<- [HPUB foo {hdr} {hdr + 5}]") + 1] == (
        '<<- MSG_PAYLOAD: ["NATS/1.0\\r\\nK: v\\r\\n\\r\\nhello"]'
    )
    assert any("Server is ready" in line for line in lines)


def test_an_unwritable_log_file_stops_the_start(tmp_path: Path) -> None:
    conf = tmp_path / "s.conf"
    conf.write_text(f'listen: 127.0.0.1:{_free_port()}\nlog_file: "{tmp_path}/no/such/dir.log"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "jetraft", "server", "-c", str(conf)], capture_output=True,
        timeout=30,
    )  # fmt: skip
    assert proc.returncode == 1 and b"no/such/dir.log" in proc.stderr


async def test_sighup_reloads_logging_and_refuses_other_changes(tmp_path: Path) -> None:
    """A reload applies the logging options (here the protocol trace, to connections open
    already too) and refuses any other change as a whole, naming it, with the server going
    on as configured before (it does not die of the signal)."""
    port = _free_port()
    log_file = tmp_path / "server.log"
    conf = tmp_path / "reload.conf"
    base = f'listen: 127.0.0.1:{port}\nlog_file: "{log_file}"\n'
    conf.write_text(base)
    proc = _start(["-c", str(conf)])

    def wait_log(text: str, count: int = 1) -> None:
        deadline = time.monotonic() + 20
        while log_file.read_text().count(text) < count:
            assert time.monotonic() < deadline, (text, log_file.read_text())
            assert proc.poll() is None, log_file.read_text()
            time.sleep(0.02)

    try:
        _wait_listening(proc, port)
        nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
        await nc.subscribe("before")
        await nc.flush()
        conf.write_text(base + "trace: true\n")
        proc.send_signal(signal.SIGHUP)
        wait_log("Reloaded server configuration")
        await nc.subscribe("after")
        await nc.flush()
        wait_log("<<- [SUB after 2]")
        assert "SUB before" not in log_file.read_text()
        # Users added: refused, and the server keeps running without them.
        conf.write_text(base + "trace: true\nauthorization { user: u, password: p }\n")
        proc.send_signal(signal.SIGHUP)
        wait_log("config reload not supported for authorization")
        other = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
        await other.close()
        # A file that does not parse: refused with its position.
        conf.write_text(base + "trace: {\n")
        proc.send_signal(signal.SIGHUP)
        wait_log("Failed to reload server configuration", 2)
        assert "reload.conf:" in log_file.read_text().splitlines()[-1]
        await nc.close()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0


def _signal(command: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "jetraft", "server", "--signal", command],
        capture_output=True,
        timeout=30,
    )


def test_signal_command_rotates_the_log_reloads_and_quits(tmp_path: Path) -> None:
    """``--signal CMD=PID`` (nats-server's ``-sl``) with a pid file: ``reopen`` after a log
    rotation writes to a new file, ``reload`` reads the configuration again, ``quit`` stops
    the server cleanly; a command it does not know is refused."""
    port = _free_port()
    log_file, pid_file = tmp_path / "server.log", tmp_path / "server.pid"
    conf = tmp_path / "s.conf"
    conf.write_text(f'listen: 127.0.0.1:{port}\nlog_file: "{log_file}"\npid_file: "{pid_file}"\n')
    proc = _start(["-c", str(conf)])

    def wait_log(text: str) -> None:
        deadline = time.monotonic() + 20
        while not log_file.exists() or text not in log_file.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, text
            time.sleep(0.02)

    try:
        _wait_listening(proc, port)
        rotated = tmp_path / "server.log.1"
        log_file.rename(rotated)
        assert _signal(f"reopen={pid_file}").returncode == 0
        wait_log("File log re-opened")
        assert "Server is ready" in rotated.read_text()
        assert _signal(f"reload={proc.pid}").returncode == 0
        wait_log("Reloaded server configuration")
        bad = _signal(f"explode={proc.pid}")
        assert bad.returncode == 1 and b"unknown signal 'explode'" in bad.stderr
        missing = _signal(f"reload={tmp_path / 'nope.pid'}")
        assert missing.returncode == 1 and b"could not read pid file" in missing.stderr
        assert _signal(f"quit={pid_file}").returncode == 0
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
