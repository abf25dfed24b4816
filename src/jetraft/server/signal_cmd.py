"""``jetraft server --signal CMD[=PID]`` (nats-server's ``-sl``): send a running server the
signal for CMD and exit. PID is a process id or a pid file; without it the one running
``jetraft server`` process of this user is found in /proc (several: the command refuses and
lists them)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

COMMANDS = {
    "stop": signal.SIGKILL,
    "quit": signal.SIGINT,
    "term": signal.SIGTERM,
    "reopen": signal.SIGUSR1,  # log rotation: the log file is opened again
    "reload": signal.SIGHUP,  # the configuration is read again
    "ldm": signal.SIGUSR2,  # lame duck mode
}


class SignalError(Exception):
    pass


def parse(text: str) -> tuple[signal.Signals, str]:
    """(signal, pid text or "") of ``CMD[=PID]``."""
    cmd, _, pid = text.partition("=")
    sig = COMMANDS.get(cmd.strip().lower())
    if sig is None:
        raise SignalError(f"unknown signal {cmd!r} (one of {', '.join(COMMANDS)})")
    return sig, pid.strip()


def resolve_pid(pid: str, proc: Path = Path("/proc")) -> int:
    if pid:
        if pid.isdigit():
            return int(pid)
        try:
            text = Path(pid).read_text().strip()
        except OSError as exc:
            raise SignalError(f"could not read pid file {pid}: {exc.strerror}") from exc
        if not text.isdigit():
            raise SignalError(f"pid file {pid} does not hold a process id: {text!r}")
        return int(text)
    found = running_servers(proc)
    if not found:
        raise SignalError("no jetraft server processes running")
    if len(found) > 1:
        listed = "\n".join(str(p) for p in found)
        raise SignalError(f"multiple jetraft server processes running:\n{listed}")
    return found[0]


def running_servers(proc: Path = Path("/proc")) -> list[int]:
    """Processes of this user whose command line runs ``jetraft server``, but this one."""
    me, uid = os.getpid(), os.getuid()
    out = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        words = [Path(a.decode(errors="replace")).name for a in args if a]
        sending = any(w in ("-sl", "--sl", "-signal", "--signal") or "signal=" in w for w in words)
        if "jetraft" in words and "server" in words and not sending:
            out.append(int(entry.name))
    return sorted(out)


def send(text: str) -> None:
    sig, pid = parse(text)
    target = resolve_pid(pid)
    try:
        os.kill(target, sig)
    except OSError as exc:
        raise SignalError(f"could not send {sig.name} to {target}: {exc.strerror}") from exc
