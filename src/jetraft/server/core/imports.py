"""Account imports at run time: stream and service imports of config accounts.

An import is carried by subscribers of its own in the router's sublists, so the routing
paths need no knowledge of imports:

* A stream import is a ``StreamForwarder`` subscribed in the exporting account on the
  exported subject while the importing account has interest in what it would forward; it
  publishes what it is handed again in the importing account, under the mapped subject,
  with the reply subject unchanged.
* A service import is a ``ServiceForwarder`` subscribed in the importing account on the
  import's local subject; it publishes a request again in the exporting account under the
  exported subject, with a reply subject of the exporting account (``_R_.<prefix>.<token>``)
  that a ``ResponseRelay`` (subscribed there on ``_R_.<prefix>.>``) maps back to the
  requester's reply in the importing account.

Forwarders say ``is_route``: like a route's subscriptions they stand for interest elsewhere,
so their subscriptions are not advertised to the other servers of a cluster and messages
that arrive over a route never reach them (the server where a message entered did the
forwarding, and route interest in the importing account carries the result on). The router
hands them messages through the route methods, once each: ``forward`` one message,
``forward_runs`` the runs of client publishes of one read (a stream import passes them on as
one batch, so the importer's subscribers take them as the exporter's would). A
``ResponseRelay`` is an ordinary subscriber: its interest is advertised, since the responder
may sit on another server, and responses reach it from routes too.

A runtime hop limit guards against loops the config checks cannot see (an account that
imports from itself under another subject, say).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from jetraft.config.model import (
    RESPONSE_SINGLETON,
    AccountConfig,
    AccountExport,
    AccountImport,
)
from jetraft.protocol.client import PubBatch, PubLine
from jetraft.protocol.headers import encode_headers, header_value
from jetraft.protocol.subjects import filters_overlap, is_subset
from jetraft.server.core.accounts import (
    Account,
    Subscription,
    deliver_each,
    deliver_replies_each,
    deliver_run_each,
)
from jetraft.server.core.import_mapping import (
    Mapper,
    build_mapper,
    check_imports,
    source_filter,
    untokenize,
)
from jetraft.server.core.router import Router
from jetraft.server.core.stand_in import StandIn

__all__ = [
    "MAX_HOPS",
    "ResponseRelay",
    "ServiceForwarder",
    "StreamForwarder",
    "check_imports",
    "install_imports",
]

MAX_HOPS = 8  # imports one message may pass through (nats-server stops at a repeated import)
REPLY_PREFIX = "_R_."
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_JS_ACK = "$JS.ACK."  # pull consumers' acks cross as they are (as nats-server does)
_JS_PULL = "$JS.API.CONSUMER.MSG.NEXT."  # pull requests: their deliveries show another subject
REQUEST_INFO = "Nats-Request-Info"
_MAPPED_CACHE = 1024  # mapped subjects a stream import remembers

class _Hops:
    """How many imports the message being routed has passed (routing is synchronous, so
    one count for the process serves every message in turn)."""

    depth = 0

    @classmethod
    def enter(cls) -> bool:
        """One more import on the message's way; False past the limit. Pair with
        ``leave``."""
        if cls.depth >= MAX_HOPS:
            return False
        cls.depth += 1
        return True

    @classmethod
    def leave(cls) -> None:
        cls.depth -= 1


class _Forwarder(StandIn):
    """What a forwarder shares: the hop limit around its ``relay`` (see ``StandIn``)."""

    def __init__(self, router: Router, target: Account, mapper: Mapper) -> None:
        self.router = router
        self.target = target
        self.mapper = mapper

    def forward(
        self,
        account: Account,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        data: bytes,
        queues: Sequence[str],
        route_by: str | None,
    ) -> None:
        if not self.enter():
            return
        try:
            self.relay(subject, reply, hdr, data, route_by)
        finally:
            self.leave()

    def relay(
        self, subject: str, reply: str | None, hdr: bytes | None, data: bytes, route_by: str | None
    ) -> None:
        raise NotImplementedError

    def enter(self) -> bool:
        """``_Hops.enter`` for message tracing, which routes a message across an import
        itself."""
        return _Hops.enter()

    def leave(self) -> None:
        _Hops.leave()


class _ImportPublisher:
    """The sender of publishes a stream import passes on: it never misses its own messages
    (it has none) and asks for no notices."""

    closed = False
    echo = True
    no_responders = False

    def __init__(self, account: Account) -> None:
        self.account = account

    def enqueue(self, frame: bytes) -> None:
        pass  # asks for nothing, so is sent nothing


class StreamForwarder(_Forwarder):
    """A stream import: publishes in ``target`` what it takes in ``source``, where it is
    subscribed while ``target`` has interest that could take it (a subscription of a client,
    of a component or of a route, whose subject could meet the import's local subject), as
    nats-server's import subscriptions come and go with the importer's subscribers: without
    a listener in the importing account, a request in the exporting one hears no-responders
    and a push consumer delivering there has no interest."""

    def __init__(
        self,
        router: Router,
        source: Account,
        target: Account,
        mapper: Mapper,
        imp: AccountImport,
        sid: str,
    ) -> None:
        super().__init__(router, target, mapper)
        self.source = source
        self.subject = imp.subject
        self.local = untokenize(imp.local)  # what the importer's subscribers would see
        self.sid = sid
        # The subscriptions in ``source`` that stand for the importer's interest, one per
        # filter, with how many of the importer's subscriptions need it: as nats-server's
        # shadow subscriptions, they cover what the importer listens to, not the whole
        # export (a push consumer in the exporting account is "bound" only when its own
        # deliver subject is listened to).
        self.shadows: dict[str, tuple[Subscription, int]] = {}
        self._mapped: dict[str, str] = {}
        self._publisher = _ImportPublisher(target)

    @property
    def subscribed(self) -> bool:
        return bool(self.shadows)

    def interest_changed(self, sub: Subscription, added: bool) -> None:
        conn = sub.conn
        if conn is self or isinstance(conn, ServiceForwarder):
            return
        if not filters_overlap(sub.subject, self.local):
            return
        wanted = source_filter(self.subject, self.local, sub.subject)
        if wanted is None:
            return
        shadow = self.shadows.get(wanted)
        if added:
            if shadow is None:
                shadow = (Subscription(self, wanted, None, self.sid), 0)
                self.router.add_subscription(self.source, shadow[0])
            self.shadows[wanted] = (shadow[0], shadow[1] + 1)
        elif shadow is not None:
            if shadow[1] <= 1:
                del self.shadows[wanted]
                self.router.remove_subscription(self.source, shadow[0])
            else:
                self.shadows[wanted] = (shadow[0], shadow[1] - 1)

    def mapped_subject(self, subject: str) -> str | None:
        """The importer's subject for ``subject`` (None: the import does not map it)."""
        return self._map(subject)

    def _map(self, subject: str) -> str | None:
        """The mapped subject, remembered: a run of publishes shares its subject object, and
        equal mapped subjects must be one object for the router to group them."""
        mapped = self._mapped.get(subject)
        if mapped is None:
            mapped = self.mapper(subject)
            if mapped is None:
                return None
            if len(self._mapped) >= _MAPPED_CACHE:
                self._mapped.clear()
            self._mapped[subject] = mapped
        return mapped

    def relay(
        self, subject: str, reply: str | None, hdr: bytes | None, data: bytes, route_by: str | None
    ) -> None:
        if route_by is None or route_by == subject:
            mapped = self._map(subject)
            if mapped is not None:
                self.router.route_message(None, self.target, mapped, reply, hdr, data)
        else:
            # JetStream push delivery: routed by the deliver subject, shown with its own.
            mapped = self._map(route_by)
            if mapped is not None:
                self.router.route_message(None, self.target, subject, reply, hdr, data, mapped)

    def forward_runs(self, account: Account, batch: PubBatch, first: int, stop: int) -> None:
        """Client publishes: the runs again, under their mapped subjects, as one batch in the
        target account (its subscribers take each run in one piece, as the publisher's)."""
        lines, starts = batch.lines, batch.starts
        base = starts[first]
        mapped_lines: list[PubLine] = []
        mapped_starts = [0]
        for r in range(first, stop):
            line = lines[r]
            mapped = self._map(line[0])
            if mapped is None:  # cannot be for a subject this subscription matched; be safe
                super().forward_runs(account, batch, first, stop)
                return
            mapped_lines.append((mapped, line[1], line[2], line[3], line[4]))
            mapped_starts.append(starts[r + 1] - base)
        if not _Hops.enter():
            return
        try:
            self.router.route_pubs(
                self._publisher,
                self.target,
                PubBatch(mapped_lines, mapped_starts, batch.bodies[base : starts[stop]]),
            )
        finally:
            _Hops.leave()


class ServiceForwarder(_Forwarder):
    """A service import: subscribed in the importing account ``home`` on the local subject,
    publishes requests in ``target`` (the exporting account) with a reply of its own."""

    def __init__(
        self,
        router: Router,
        home: Account,
        target: Account,
        mapper: Mapper,
        responses: ResponseRelay,
        export: AccountExport,
    ) -> None:
        super().__init__(router, target, mapper)
        self.home = home
        self.responses = responses
        self.singleton = export.response_type == RESPONSE_SINGLETON
        self.threshold_ns = export.response_threshold_ns
        info = json.dumps({"acc": home.name}, separators=(",", ":"))
        self._info_block = encode_headers({REQUEST_INFO: info})
        self._info_line = f"{REQUEST_INFO}: {info}\r\n".encode()

    def relay(
        self, subject: str, reply: str | None, hdr: bytes | None, data: bytes, route_by: str | None
    ) -> None:
        to = self.mapper(subject)
        if to is None:
            return
        router = self.router
        hdr = self._with_info(hdr)
        if reply is None or reply.startswith(_JS_ACK):
            router.route_message(None, self.target, to, reply, hdr, data)
            return
        mapped_reply = self.responses.track(
            self.home, reply, self.singleton, self.threshold_ns, to.startswith(_JS_PULL)
        )
        if not router.route_message(None, self.target, to, mapped_reply, hdr, data):
            self.responses.drop(mapped_reply)
            self._no_responders(subject, reply)

    def _with_info(self, hdr: bytes | None) -> bytes:
        """The request with nats-server's ``Nats-Request-Info`` header naming the requester's
        account (a header already there, from an earlier import, stays as it is). nats-server
        also gives the requester's round-trip time, which the forwarder does not know."""
        if hdr is None:
            return self._info_block
        if header_value(hdr, REQUEST_INFO) is not None:
            return hdr
        return hdr[:-2] + self._info_line + b"\r\n"

    def _no_responders(self, subject: str, reply: str) -> None:
        """Nobody in the exporting account took the request: the requester gets the 503
        notice it asked for, unless someone in its own account took the request."""
        home = self.home.sublist
        match = home.match(subject)
        if match.queues or any(not isinstance(s.conn, _Forwarder) for s in match.plain):
            return
        for sub in home.match(reply).plain:
            conn = sub.conn
            if not conn.is_route and getattr(conn, "no_responders", False) is True:
                hdr = encode_headers({"Nats-Subject": subject}, status=503)
                conn.deliver(sub, reply, None, hdr, b"")
                return


@dataclass(slots=True)
class _Pending:
    account: Account
    reply: str
    singleton: bool
    threshold_ns: int
    deadline_ns: int
    sub: Subscription | None = None  # the mapping's own subscription, when it has one


class ResponseRelay:
    """The responses of one exporting account to requests that came through service imports
    on this server: ``_R_.<prefix>.<token>`` -> the requester's reply in its own account.

    A Singleton mapping ends with the first response; a Stream or Chunked one lasts until the
    export's threshold passes without a response (or an empty message ends it). Any mapping
    ends when its threshold passes without a response; expired ones are swept as new
    requests come, and a late response finds none.

    One wildcard subscription takes the responses sent to their mapped reply subject. A
    JetStream pull request's mapping gets a subscription of its own as well: the consumer
    routes its deliveries by the reply but shows them with the stored subject, and a
    subscriber's ``deliver`` is given the shown subject only (here, and when they come over
    a route from the consumer's leader); the subscription says which mapping they are for."""

    closed = False
    is_route = False
    frames_answers = False

    def __init__(
        self,
        router: Router,
        account: Account,
        clock: Callable[[], int] = time.monotonic_ns,
        rng: random.Random | None = None,
    ) -> None:
        self.router = router
        self.account = account
        self._clock = clock
        self._rng = rng or random.Random()
        self.prefix = f"{REPLY_PREFIX}{self._token()}."
        self.pending: dict[str, _Pending] = {}
        self.sub = Subscription(self, self.prefix + ">", None, "*")
        router.add_subscription(account, self.sub)

    def _token(self) -> str:
        return "".join(self._rng.choice(_DIGITS) for _ in range(6))

    def track(
        self, account: Account, reply: str, singleton: bool, threshold_ns: int, own: bool = False
    ) -> str:
        """A new mapping to ``reply`` in ``account``; ``own``: with a subscription of its own
        (responses routed by the mapped subject but shown with another)."""
        now = self._clock()
        self._sweep(now)
        pending = self.pending
        subject = self.prefix + self._token()
        while subject in pending:
            subject = self.prefix + self._token()
        p = _Pending(account, reply, singleton, threshold_ns, now + threshold_ns)
        pending[subject] = p
        if own:
            p.sub = Subscription(self, subject, None, subject)
            self.router.add_subscription(self.account, p.sub)
        return subject

    def drop(self, subject: str) -> None:
        p = self.pending.pop(subject, None)
        if p is not None and p.sub is not None:
            self.router.remove_subscription(self.account, p.sub)

    def _sweep(self, now: int) -> None:
        pending = self.pending
        while pending:
            first = next(iter(pending))
            if pending[first].deadline_ns > now:
                return
            self.drop(first)

    def deliver(
        self, sub: Subscription, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        if sub is self.sub:
            p = self.pending.get(subject)
            if p is None or p.sub is not None:  # one with its own subscription takes it there
                return False
            return self._respond(subject, None, reply, hdr, data)
        key = sub.subject
        return self._respond(key, None if subject == key else subject, reply, hdr, data)

    def _respond(
        self, key: str, shown: str | None, reply: str | None, hdr: bytes | None, data: bytes
    ) -> bool:
        """Deliver a response to the mapping ``key`` to the requester: on its reply subject,
        or routed by it and shown as ``shown``."""
        p = self.pending.get(key)
        if p is None:
            return False
        now = self._clock()
        if now >= p.deadline_ns:
            self.drop(key)
            return False
        if p.singleton or (not data and hdr is None):
            self.drop(key)
        else:  # a stream of responses: the threshold counts from the latest one
            p.deadline_ns = now + p.threshold_ns
            self.pending[key] = self.pending.pop(key)
        if not _Hops.enter():
            return False
        try:
            if shown is None:
                got = self.router.route_message(None, p.account, p.reply, reply, hdr, data)
            else:
                got = self.router.route_message(
                    None, p.account, shown, reply, hdr, data, p.reply
                )
        finally:
            _Hops.leave()
        if not got:
            self.drop(key)
        return True

    def deliver_run(
        self, sub: Subscription, batch: PubBatch, first: int, stop: int, msgs: int, size: int
    ) -> int:
        return deliver_run_each(self, sub, batch, first, stop)

    def deliver_answers(
        self, sub: Subscription, answers: Sequence[tuple[str, bytes]], first: int, stop: int
    ) -> tuple[int, int]:
        return deliver_each(self, sub, answers, first, stop)

    def deliver_replies(
        self, sub: Subscription, subject: str, items: Sequence[tuple[bytes | None, bytes]]
    ) -> tuple[int, int]:
        return deliver_replies_each(self, sub, subject, items)


def _export_for(exporter: AccountConfig, imp: AccountImport) -> AccountExport:
    """The service export an import goes through (its response type and threshold)."""
    services = [e for e in exporter.exports if e.service]
    for e in services:
        if e.subject == imp.subject:
            return e
    for e in services:
        if is_subset(imp.subject, e.subject):
            return e
    return AccountExport(True, imp.subject)


def install_imports(
    router: Router,
    accounts: Mapping[str, Account],
    configs: Sequence[AccountConfig],
    clock: Callable[[], int] = time.monotonic_ns,
    rng: random.Random | None = None,
) -> dict[str, ResponseRelay]:
    """Subscribe the forwarders of every import (a stream import's once its importer has
    interest: call this before anyone subscribes); returns the response relays by exporting
    account (created for accounts that export a service someone imports)."""
    by_name = {c.name: c for c in configs}
    relays: dict[str, ResponseRelay] = {}
    watcher = _ImportWatcher()
    for cfg in configs:
        home = accounts[cfg.name]
        for n, imp in enumerate(cfg.imports):
            exporter = accounts[imp.account]
            mapper = build_mapper(imp)
            if imp.service:
                relay = relays.get(imp.account)
                if relay is None:
                    relay = relays[imp.account] = ResponseRelay(router, exporter, clock, rng)
                export = _export_for(by_name[imp.account], imp)
                fwd: _Forwarder = ServiceForwarder(router, home, exporter, mapper, relay, export)
                sub = Subscription(fwd, untokenize(imp.local), None, str(n))
                router.add_subscription(home, sub)
            else:
                stream = StreamForwarder(router, exporter, home, mapper, imp, str(n))
                watcher.by_account.setdefault(home, []).append(stream)
    if watcher.by_account:
        assert router.watcher is None
        router.watcher = watcher
    return relays


class _ImportWatcher:
    """Hands changes of interest in importing accounts to their stream imports."""

    def __init__(self) -> None:
        self.by_account: dict[Account, list[StreamForwarder]] = {}

    def local_interest(self, account: Account, sub: Subscription, added: bool) -> None:
        imports = self.by_account.get(account)
        if imports is not None:
            for stream in imports:
                stream.interest_changed(sub, added)
