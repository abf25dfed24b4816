"""Run a local cluster: one `jetraft server -c FILE` process per config, in the foreground.

    python -m jetraft.server.local_cluster examples/cluster/n1.conf n2.conf n3.conf

What `make run` does. It starts every server, prints their client URLs once they serve and
the meta leader once JetStream is ready, passes their output through (each line prefixed
with the server's config name), and on Ctrl-C or SIGTERM stops them all cleanly (SIGTERM,
then waits). A server that exits on its own is reported; the others keep running.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from jetraft.config import ConfigError, load_config

READY_TIMEOUT_S = 60.0


@dataclass
class Member:
    conf: Path
    client_url: str
    http_url: str
    proc: subprocess.Popen[bytes] | None = None
    label: str = ""
    buf: bytes = field(default=b"")


def _member(conf: Path) -> Member:
    cfg = load_config(conf)
    host = cfg.host if cfg.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    http_host = cfg.http_host or host
    if http_host in ("0.0.0.0", "::"):
        http_host = "127.0.0.1"
    http = f"http://{http_host}:{cfg.http_port}" if cfg.http_port > 0 else ""
    return Member(conf, f"nats://{host}:{cfg.port}", http, label=cfg.server_name or conf.stem)


# Serving clients, whatever JetStream's state (the full /healthz also wants a meta leader).
_SERVING = "/healthz?js-server-only=true"


def _get(url: str) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            body = json.loads(resp.read())
            return body if isinstance(body, dict) else None
    except (OSError, ValueError):
        return None


def run(confs: list[Path]) -> int:
    try:
        members = [_member(c) for c in confs]
    except (ConfigError, OSError) as exc:
        print(f"jetraft: configuration error: {exc}", file=sys.stderr)
        return 1
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    sel = selectors.DefaultSelector()
    for m in members:
        m.proc = subprocess.Popen(
            [sys.executable, "-m", "jetraft", "server", "-c", str(m.conf)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert m.proc.stdout is not None
        os.set_blocking(m.proc.stdout.fileno(), False)
        sel.register(m.proc.stdout, selectors.EVENT_READ, m)
    started = time.monotonic()
    announced_urls = announced_js = False
    while not stop and any(m.proc is not None for m in members):
        for key, _ in sel.select(timeout=0.2):
            _pump(key.data, sel)
        if not announced_urls and all(m.http_url and _get(m.http_url + _SERVING)
                                      for m in members):
            announced_urls = True
            urls = ",".join(m.client_url for m in members)
            print(f"\n*** cluster up: clients connect to {urls}\n", flush=True)
        if announced_urls and not announced_js:
            jsz = _get(members[0].http_url + "/jsz") if members[0].http_url else None
            meta = jsz.get("meta_cluster") if jsz else None
            if isinstance(meta, dict) and meta.get("leader"):
                announced_js = True
                print(f"*** JetStream ready (meta leader {meta['leader']})\n", flush=True)
        if not announced_urls and time.monotonic() - started > READY_TIMEOUT_S:
            print("*** the servers did not all come up; see their output above", flush=True)
            announced_urls = True
        for m in members:
            if m.proc is not None and m.proc.poll() is not None:
                print(f"*** {m.label} exited with status {m.proc.returncode}", flush=True)
                sel.unregister(m.proc.stdout)  # type: ignore[arg-type]
                m.proc = None
    for m in members:
        if m.proc is not None and m.proc.poll() is None:
            m.proc.terminate()
    for m in members:
        if m.proc is not None:
            try:
                m.proc.wait(20)
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait(10)
            assert m.proc.stdout is not None
            rest = m.proc.stdout.read() or b""
            _print_lines(m, m.buf + rest, final=True)
    return 0


def _pump(m: Member, sel: selectors.BaseSelector) -> None:
    assert m.proc is not None and m.proc.stdout is not None
    try:
        chunk = m.proc.stdout.read()
    except BlockingIOError:
        return
    if chunk:
        m.buf = _print_lines(m, m.buf + chunk)


def _print_lines(m: Member, data: bytes, final: bool = False) -> bytes:
    *lines, rest = data.split(b"\n")
    if final and rest:
        lines.append(rest)
        rest = b""
    for line in lines:
        print(f"{m.label:>8} | {line.decode(errors='replace')}", flush=True)
    return rest


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    return run([Path(a) for a in args])


if __name__ == "__main__":
    sys.exit(main())
