"""Stand-in for ``nats-server -c CONF`` when nats.js's own test suite runs against jetraft.

nats.js's test launcher (``nst/src/launcher.ts``) writes a config with random ports (-1),
leafnode and websocket listeners and ``ports_file_dir``, spawns ``nats-server -c FILE`` and
waits for ``<ports_file_dir>/nats-server_<pid>.ports``. jetraft has no leafnode or websocket
listeners (it refuses configs that ask for them) and writes no ports file, so this script:
drops those two blocks, picks free loopback ports for the listeners given as -1, writes the
ports file for its own pid, and then replaces itself with ``python -m jetraft server`` (same
pid, so the launcher's signals reach jetraft). The translated config goes next to the
original as ``<file>.jetraft.json``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

from jetraft.config.syntax import parse_file_tree, to_plain

PORTS_WAIT_S = 3.5  # from the shim's start, itself up to a second or so after the spawn


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listen(value: Any, default_host: str) -> tuple[str, int]:
    """'host:port' or a bare port; -1 or 0 become a free port."""
    host, _, port_text = str(value).rpartition(":")
    port = int(port_text)
    if port in (-1, 0):
        port = _free_port()
    return host or default_host, port


def translate(conf: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list[str]], str | None]:
    """(jetraft config, ports file content, ports file directory)."""
    ports_dir = conf.pop("ports_file_dir", None)
    for key in ("leafnodes", "leaf", "websocket", "ws"):
        conf.pop(key, None)
    host = str(conf.get("host", "127.0.0.1"))
    port = int(conf.get("port", 4222))
    conf["port"] = port = _free_port() if port in (-1, 0) else port
    ports = {"nats": [f"nats://{host}:{port}"]}
    if conf.get("http") is not None:
        mhost, mport = _listen(conf["http"], "127.0.0.1")
        conf["http"] = f"{mhost}:{mport}"
        ports["monitoring"] = [f"http://{mhost}:{mport}"]
    cluster = conf.get("cluster")
    if isinstance(cluster, dict) and cluster.get("listen"):
        chost, cport = _listen(cluster["listen"], "127.0.0.1")
        cluster["listen"] = f"{chost}:{cport}"
        ports["cluster"] = [f"nats://{chost}:{cport}"]
    return conf, ports, ports_dir


def main(argv: list[str]) -> None:
    if argv[:1] in (["-v"], ["--version"], ["version"]):
        print("nats-server: jetraft (nats.js suite shim)")
        return
    if len(argv) != 2 or argv[0] != "-c":
        sys.exit(f"nats-server shim: unsupported arguments {argv}")
    conf, ports, ports_dir = translate(to_plain(parse_file_tree(argv[1])))
    out = argv[1] + ".jetraft.json"
    with open(out, "w") as f:
        json.dump(conf, f, indent=1, ensure_ascii=False)  # jetraft reads no \u escapes
    if ports_dir:
        path = os.path.join(str(ports_dir), f"nats-server_{os.getpid()}.ports")
        if os.fork() == 0:
            _write_ports_when_listening(path, ports, str(conf.get("host", "127.0.0.1")),
                                        int(conf["port"]))
    os.execv(sys.executable, [sys.executable, "-m", "jetraft", "server", "-c", out])


def _write_ports_when_listening(path: str, ports: dict[str, list[str]], host: str,
                                port: int) -> None:
    """In a forked child: write the ports file once jetraft listens, or after PORTS_WAIT_S
    anyway. The launcher allows 5 s for the ports file and then 5 s more for the port to
    answer, so a Python server slow to start under load gets most of both."""
    deadline = time.monotonic() + PORTS_WAIT_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1" if host == "0.0.0.0" else host, port),
                                     timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    if os.getppid() == 1:
        os._exit(0)  # jetraft exited (a refused config): no ports file to leave behind
    with open(path, "w") as f:
        json.dump(ports, f)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
