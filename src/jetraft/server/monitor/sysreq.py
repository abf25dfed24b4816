"""How the monitoring data is served in the system account: ``$SYS.REQ.SERVER.*`` requests,
as ``nats server ls``, ``nats server report jetstream`` and ``nats server request`` send them.

Every server subscribes to ``$SYS.REQ.SERVER.PING`` (statsz), ``$SYS.REQ.SERVER.PING.<KIND>``
(every server answers) and ``$SYS.REQ.SERVER.<server id>.<KIND>`` (this one only). These are
ordinary subscriptions of an internal client in the system account, so in a cluster the route
mesh carries the interest and the requests like any other, and a PING gets one answer per
server. Only connections bound to the system account can reach them; a kind nobody serves
gets no responders, as from nats-server.

A request body may hold the endpoint's options (nats-server's JSON names, translated here to
the query-string names the builders take) and filters (``server_name``, ``cluster``, ``host``
as substrings, or exactly with ``exact_match``; ``tags`` all present; ``domain``): a server
that does not match stays silent. The answer is ``{"server": <ServerInfo>, "data": ...}`` (for
STATSZ ``"statsz"``), or ``"error"`` instead of data when the body cannot be read; IDZ answers
the bare ``{name, host, id}``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from jetraft.server.core.accounts import Account
from jetraft.server.core.internal import InternalClient
from jetraft.server.core.router import Router
from jetraft.server.monitor.data import MonitorData, MonitoredServer, Query, rfc3339
from jetraft.server.monitor.health import healthz

log = logging.getLogger("jetraft.monitor")

PREFIX = "$SYS.REQ.SERVER."
PING = PREFIX + "PING"
KINDS = ("STATSZ", "VARZ", "CONNZ", "SUBSZ", "ROUTEZ", "JSZ", "HEALTHZ", "IDZ", "ACCOUNTZ")
_JETSTREAM_ENABLED = 1  # ServerInfo.flags bit; the other nats-server capabilities do not apply

# JSON option -> (query name, JSON type); types are checked as Go's decoder would.
_Opt = tuple[str, type]
_OPTIONS: dict[str, dict[str, _Opt]] = {
    "CONNZ": {
        "sort": ("sort", str), "subscriptions": ("subs", bool),
        "subscriptions_detail": ("subs_detail", bool), "offset": ("offset", int),
        "limit": ("limit", int), "state": ("state", int), "cid": ("cid", int),
        "user": ("user", str), "acc": ("acc", str),
    },
    "SUBSZ": {
        "subscriptions": ("subs", bool), "offset": ("offset", int), "limit": ("limit", int),
        "account": ("acc", str), "test": ("test", str),
    },
    "ROUTEZ": {"subscriptions": ("subs", bool), "subscriptions_detail": ("subs_detail", bool)},
    "JSZ": {
        "account": ("acc", str), "accounts": ("accounts", bool), "streams": ("streams", bool),
        "consumer": ("consumers", bool), "config": ("config", bool),
        "leader_only": ("leader-only", bool), "offset": ("offset", int),
        "limit": ("limit", int), "raft": ("raft", bool),
    },
    "HEALTHZ": {
        name: (name, bool)
        for name in ("js-enabled", "js-enabled-only", "js-server-only", "js-meta-only",
                     "details")
    } | {"account": ("account", str), "stream": ("stream", str), "consumer": ("consumer", str)},
    "ACCOUNTZ": {"account": ("acc", str)},
}
_FILTERS: dict[str, type] = {
    "server_name": str, "cluster": str, "host": str, "exact_match": bool, "tags": list,
    "domain": str,
}
_CONN_STATES = {"0": "open", "1": "closed", "2": "all"}
_GO_TYPES = {str: "string", bool: "bool", int: "int", list: "[]string"}


class BadRequest(ValueError):
    """The request body cannot be read (nats-server answers 400)."""


class SystemHost(MonitoredServer, Protocol):
    @property
    def router(self) -> Router: ...

    def account_named(self, name: str) -> Account | None: ...


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    for kind, word in ((str, "string"), (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return word
    return "null"


def _checked(name: str, value: Any, want: type) -> Any:
    ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
    if want is list and ok:
        ok = all(isinstance(v, str) for v in value)
    if value is not None and not ok:
        raise BadRequest(f"json: cannot unmarshal {_json_kind(value)} into Go struct field "
                         f".{name} of type {_GO_TYPES[want]}")
    return value


def parse_request(kind: str, body: bytes) -> tuple[dict[str, Any], dict[str, str]]:
    """(filters, builder options) from a request body; BadRequest when it is not valid."""
    if not body.strip():
        return {}, {}
    try:
        doc = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"invalid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadRequest(f"json: cannot unmarshal {_json_kind(doc)} into the request options")
    filters = {k: _checked(k, doc[k], t) for k, t in _FILTERS.items() if k in doc}
    query: dict[str, str] = {}
    for name, (qname, want) in _OPTIONS.get(kind, {}).items():
        value = _checked(name, doc.get(name), want)
        if not value:
            continue  # Go's zero value: the same as not given (Go clients send every field)
        query[qname] = "true" if value is True else str(value)
    if query.pop("subs_detail", "") == "true":
        query["subs"] = "detail"
    if kind == "CONNZ" and "state" in query:
        query["state"] = _CONN_STATES.get(query["state"], query["state"])
    return filters, query


class SystemRequests:
    def __init__(self, server: SystemHost, data: MonitorData) -> None:
        self.server = server
        self.data = data
        self.client: InternalClient | None = None
        self._seq = 0
        self._builders: dict[str, Callable[[Query], dict[str, Any]]] = {
            "VARZ": data.varz,
            "CONNZ": data.connz,
            "SUBSZ": data.subsz,
            "ROUTEZ": data.routez,
            "JSZ": data.jsz,
            "RAFTZ": data.raftz,
            "ACCOUNTZ": data.accountz,
            "HEALTHZ": functools.partial(healthz, server),
        }

    def start(self) -> None:
        """Subscribe in the system account (nothing to do without one)."""
        name = self.server.auth.system_account_name
        account = self.server.account_named(name) if name else None
        if account is None:
            return
        client = InternalClient(self.server.router, account, "system requests")
        self.client = client
        client.subscribe(PING, functools.partial(self._on_request, "STATSZ"))
        for kind in KINDS:
            handler = functools.partial(self._on_request, kind)
            client.subscribe(f"{PING}.{kind}", handler)
            client.subscribe(f"{PREFIX}{self.server.server_id}.{kind}", handler)

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    # --- answering ---------------------------------------------------------------------------

    def _on_request(
        self, kind: str, subject: str, reply: str | None, hdr: bytes | None, body: bytes
    ) -> None:
        if not reply or self.client is None:
            return
        out = self.answer(kind, body)
        if out is not None:
            self.client.publish(reply, msgspec.json.encode(out))

    def answer(self, kind: str, body: bytes) -> dict[str, Any] | None:
        """The reply to one request, or None when this server stays silent."""
        s = self.server
        if kind == "IDZ":
            return {"name": s.name, "host": s.config.host, "id": s.server_id}
        try:
            filters, query = parse_request(kind, body)
        except BadRequest as exc:
            return {"server": self.server_info(), "error": {"code": 400, "description": str(exc)}}
        if not self.matches(filters):
            return None
        if kind == "STATSZ":
            return {"server": self.server_info(), "statsz": self.data.statsz()}
        try:
            data = self._builders[kind](query)
        except ValueError as exc:
            return {"server": self.server_info(), "error": {"code": 500, "description": str(exc)}}
        return {"server": self.server_info(), "data": data}

    def matches(self, f: dict[str, Any]) -> bool:
        """nats-server's request filter: does this request concern this server?"""
        cfg = self.server.config
        mine = {
            "server_name": self.server.name,
            "host": cfg.host,
            "cluster": cfg.cluster.name if cfg.cluster is not None else "",
        }
        exact = bool(f.get("exact_match"))
        for key, have in mine.items():
            want = f.get(key) or ""
            if want and (want != have if exact else want not in have):
                return False
        tags = {t.lower() for t in cfg.server_tags}
        if any(t.strip().lower() not in tags for t in f.get("tags") or ()):
            return False
        domain = f.get("domain") or ""
        return not domain or domain == self._domain()

    def _domain(self) -> str:
        cfg = self.server.config
        js = cfg.jetstream or cfg.jetstream_settings
        return js.domain if js is not None else ""

    def server_info(self) -> dict[str, Any]:
        """The ``server`` part of every answer; ``seq`` counts this server's answers."""
        s = self.server
        cfg = s.config
        self._seq += 1
        js = s.jetstream is not None
        info: dict[str, Any] = {"name": s.name, "host": cfg.host, "id": s.server_id}
        if cfg.cluster is not None and cfg.cluster.name:
            info["cluster"] = cfg.cluster.name
        if self._domain():
            info["domain"] = self._domain()
        info["ver"] = s.info_version()
        if cfg.server_tags:
            info["tags"] = list(cfg.server_tags)
        info.update(
            jetstream=js,
            flags=_JETSTREAM_ENABLED if js else 0,
            seq=self._seq,
            time=rfc3339(time.time()),
        )
        return info
