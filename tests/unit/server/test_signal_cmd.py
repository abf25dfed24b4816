"""``--signal``: commands, pid arguments and the search for a running server."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from jetraft.server.signal_cmd import SignalError, parse, resolve_pid


def _proc(root: Path, pid: int, *args: str) -> None:
    (root / str(pid)).mkdir()
    (root / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in args) + b"\0")


def test_commands_and_pids(tmp_path: Path) -> None:
    assert parse("reload") == (signal.SIGHUP, "")
    assert parse("LDM=42") == (signal.SIGUSR2, "42")
    assert parse("reopen=/run/j.pid") == (signal.SIGUSR1, "/run/j.pid")
    with pytest.raises(SignalError, match="unknown signal 'boom'"):
        parse("boom=1")
    assert resolve_pid("17") == 17
    pid_file = tmp_path / "j.pid"
    pid_file.write_text("4242\n")
    assert resolve_pid(str(pid_file)) == 4242
    pid_file.write_text("not a pid")
    with pytest.raises(SignalError, match="does not hold a process id"):
        resolve_pid(str(pid_file))


def test_the_one_running_server_is_found(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "self").mkdir()  # not a pid
    _proc(proc, 10, "/usr/bin/python3", "-m", "jetraft", "server", "-c", "a.conf")
    _proc(proc, 11, "/usr/bin/python3", "-m", "jetraft", "bench")  # not a server
    _proc(proc, 12, "/venv/bin/jetraft", "server", "--signal", "reload")  # a sender
    _proc(proc, 13, "/usr/sbin/nats-server", "-c", "n.conf")
    assert resolve_pid("", proc) == 10
    _proc(proc, 14, "/venv/bin/jetraft", "server")
    with pytest.raises(SignalError, match="multiple jetraft server processes running:\n10\n14"):
        resolve_pid("", proc)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SignalError, match="no jetraft server processes running"):
        resolve_pid("", empty)
