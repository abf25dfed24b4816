"""The protocol trace log (``trace: true``, ``-V``): each operation a client sends, and each
protocol frame the server answers with, as a TRC line naming the connection, the way
nats-server's trace shows them (``<<- [SUB foo 1]``, ``->> [PONG]``).

Delivered messages show their MSG/HMSG line (not their payload); INFO is not traced. The
connection only calls in here when tracing is on, and a traced connection leaves the batched
publish and delivery paths, so tracing costs nothing but a flag test when it is off.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

TRACE = 5  # below DEBUG: -V shows these, -D does not
logging.addLevelName(TRACE, "TRC")
log = logging.getLogger("jetraft.trace")


class Traced(Protocol):
    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def cid(self) -> int: ...

    @property
    def headers(self) -> bool: ...


def _who(conn: Traced) -> str:
    return f"{conn.host}:{conn.port} - cid:{conn.cid}"


def incoming(conn: Traced, op: str) -> None:
    log.log(TRACE, "%s - <<- [%s]", _who(conn), op)


def connect(conn: Traced, options: dict[str, Any]) -> None:
    shown = dict(options)
    for secret in ("pass", "auth_token", "sig", "jwt"):
        if secret in shown:
            shown[secret] = "[REDACTED]"
    incoming(conn, "CONNECT " + json.dumps(shown, separators=(",", ":")))


def sub(conn: Traced, subject: str, queue: str | None, sid: str) -> None:
    incoming(conn, f"SUB {subject} {queue} {sid}" if queue else f"SUB {subject} {sid}")


def unsub(conn: Traced, sid: str, max_msgs: int | None) -> None:
    incoming(conn, f"UNSUB {sid}" if max_msgs is None else f"UNSUB {sid} {max_msgs}")


def publish(
    conn: Traced, subject: str, reply: str | None, hdr: bytes | None, payload: bytes
) -> None:
    args = subject if reply is None else f"{subject} {reply}"
    if hdr is None:
        incoming(conn, f"PUB {args} {len(payload)}")
    else:
        incoming(conn, f"HPUB {args} {len(hdr)} {len(hdr) + len(payload)}")
    body = payload if hdr is None else hdr + payload
    text = json.dumps(body.decode("utf-8", "replace"))
    log.log(TRACE, "%s - <<- MSG_PAYLOAD: [%s]", _who(conn), text)


def delivered(
    conn: Traced, subject: str, sid: str, reply: str | None, hdr: bytes | None, data: bytes
) -> None:
    """A message written to the client: its MSG or HMSG line (a client without headers
    support is sent the payload alone, in a MSG)."""
    if not conn.headers:
        hdr = None
    args = f"{subject} {sid}" if reply is None else f"{subject} {sid} {reply}"
    if hdr is None:
        line = f"MSG {args} {len(data)}"
    else:
        line = f"HMSG {args} {len(hdr)} {len(hdr) + len(data)}"
    log.log(TRACE, "%s - ->> [%s]", _who(conn), line)


def outgoing(conn: Traced, frame: bytes) -> None:
    if frame.startswith(b"INFO "):
        return  # not traced by nats-server either (the same at every connect)
    line = frame.split(b"\r\n", 1)[0].decode("utf-8", "replace")
    if line == "+OK":
        line = "OK"
    log.log(TRACE, "%s - ->> [%s]", _who(conn), line)
