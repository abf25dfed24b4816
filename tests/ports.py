"""Ports for the servers the tests start, unique across every test process of a run.

Asking the kernel for a free port (bind to port 0, read it, close) and handing it to a
server that binds it later races with every other process doing the same: between the
close and the server's bind, a second pytest worker can be given the very same port by
the kernel. That happened in CI (a monitoring port taken by the other worker's cluster).

So ports come from one counter shared by all test processes of the machine, kept in a
file under an exclusive lock, and taken from a range the kernel never hands out by
itself: below the ephemeral range (``net.ipv4.ip_local_port_range``), which is where
bind-to-0 and outgoing connections get their ports. Each port is still checked by a
bind before it is handed out, for processes outside the tests that hold one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

_COUNTER = Path(tempfile.gettempdir()) / f"jetraft-test-ports.{os.getuid()}"
_LOWEST = 20000  # clear of the well-known and registered ports servers commonly hold
_MIN_RANGE = 2000  # with fewer ports than this below the ephemeral range, use the kernel


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _our_range() -> tuple[int, int] | None:
    low, high = _ephemeral_range()
    if low - 1 - _LOWEST >= _MIN_RANGE:
        return _LOWEST, low - 1
    if 65535 - high >= _MIN_RANGE:
        return high + 1, 65535
    return None


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        # The servers set SO_REUSEADDR, so a port whose last connections linger in
        # TIME_WAIT is usable by them; the probe must judge it the same way.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


@contextlib.contextmanager
def _locked_counter() -> Iterator[list[int]]:
    """The shared counter as a one-element list; what the caller leaves in it is saved."""
    with open(_COUNTER, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read().strip()
        box = [int(text) if text.isdigit() else os.getpid()]
        yield box
        f.seek(0)
        f.truncate()
        f.write(str(box[0]))


def _kernel_ports(host: str, count: int) -> list[int]:
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket()
            socks.append(s)
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_ports(host: str = "127.0.0.1", count: int = 1) -> list[int]:
    """``count`` distinct ports of ``host`` that no other test process is handed."""
    span = _our_range()
    if span is None:
        return _kernel_ports(host, count)
    low, high = span
    size = high - low + 1
    ports: list[int] = []
    with _locked_counter() as box:
        for _ in range(size):
            port = low + box[0] % size
            box[0] = (box[0] + 1) % size
            if _bindable(host, port):
                ports.append(port)
                if len(ports) == count:
                    return ports
    raise RuntimeError(f"no {count} free ports on {host} in {low}-{high}")


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(host, 1)[0]
