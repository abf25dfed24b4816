"""Message routing: who gets a published message, on this server and across the cluster.

Local subscribers get the message directly. In a cluster, the account's sublist also holds
the interest of the other servers, one subscription per (route, subject, queue) owned by the
route connection (``is_route``); a message is sent over a route once, carrying the names of
the queue groups the receiver should serve. Messages that arrive over a route are delivered
to local subscribers only, never forwarded again: the mesh is complete, so one hop suffices
and loops cannot form.

Queue groups: exactly one member cluster-wide gets each message. A local member is preferred
(as nats-server does); otherwise one route holding members is picked, weighted by how many
members it stands for.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal, Protocol, cast

from jetraft.protocol import client as proto
from jetraft.protocol.client import PubBatch, PubLine, split_body
from jetraft.protocol.headers import encode_headers
from jetraft.server.core.accounts import Account, AccountStats, Subscriber, Subscription
from jetraft.server.core.sublist import Match, SubList


class Publisher(Protocol):
    """The sending side of a message: a client connection (None for server components)."""

    @property
    def closed(self) -> bool: ...

    @property
    def echo(self) -> bool: ...

    @property
    def no_responders(self) -> bool: ...

    @property
    def account(self) -> Account: ...

    def enqueue(self, frame: bytes) -> None: ...


class RouteSubscriber(Subscriber, Protocol):
    """A route connection as owner of remote interest."""

    def forward(
        self,
        account: Account,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        data: bytes,
        queues: Sequence[str],
        route_by: str | None,
    ) -> None: ...

    def forward_run(self, account: Account, batch: PubBatch, first: int, stop: int) -> None:
        """Send runs ``first`` to ``stop`` of a batch (client publishes on one subject with
        one reply) for the peer's plain subscribers (no queue groups)."""
        ...

    def forward_runs(self, account: Account, batch: PubBatch, first: int, stop: int) -> None:
        """Send runs ``first`` to ``stop`` of a batch (client publishes whose subjects and
        replies may differ: a group of ``Router.route_pubs``) for the peer's plain
        subscribers (no queue groups), in order."""
        ...

    def forward_answers(self, account: Account, subjects: list[str], bodies: list[bytes]) -> None:
        """Send answers of server components (no reply, no headers) for the peer's plain
        subscribers, in order."""
        ...


class InterestListener(Protocol):
    """Told when local interest changes (the cluster propagates it to the other servers)."""

    def local_interest(self, account: Account, sub: Subscription, added: bool) -> None: ...


class Router:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self.listener: InterestListener | None = None
        # Told of every change of interest, local or a route's (account stream imports
        # subscribe in the exporting account while the importing one has interest).
        self.watcher: InterestListener | None = None

    # --- interest ----------------------------------------------------------------------------

    def add_subscription(self, account: Account, sub: Subscription) -> None:
        account.sublist.insert(sub.subject, sub.queue, sub)
        if self.listener is not None and not sub.conn.is_route:
            self.listener.local_interest(account, sub, True)
        if self.watcher is not None:
            self.watcher.local_interest(account, sub, True)

    def remove_subscription(self, account: Account, sub: Subscription) -> None:
        if account.sublist.remove(sub.subject, sub.queue, sub):
            if self.listener is not None and not sub.conn.is_route:
                self.listener.local_interest(account, sub, False)
            if self.watcher is not None:
                self.watcher.local_interest(account, sub, False)

    # --- delivery ----------------------------------------------------------------------------

    def route_message(
        self,
        sender: Publisher | None,
        account: Account,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        data: bytes,
        route_by: str | None = None,
    ) -> int:
        """Deliver a message published on this server to every interested subscription,
        here and (over routes) on the other servers of the cluster.

        ``route_by`` picks the subscribers by another subject than the one they are shown
        (JetStream push delivery: routed by deliver subject, shown with the stored subject).
        Returns how many receivers took it (a route counts once). Server-wide totals are
        sums over accounts, so this hot path only counts per account.
        """
        size = len(data) if hdr is None else len(data) + len(hdr)
        acc_stats = account.stats
        acc_stats.in_msgs += 1
        acc_stats.in_bytes += size
        match = account.sublist.match(subject if route_by is None else route_by)
        delivered = 0
        skip: object = sender if sender is not None and not sender.echo else None
        remote: dict[RouteSubscriber, list[str]] | None = None
        for sub in match.plain:
            conn = sub.conn
            if conn.is_route:
                if remote is None:
                    remote = {}
                remote.setdefault(cast(RouteSubscriber, conn), [])
            elif conn is not skip and conn.deliver(sub, subject, reply, hdr, data):
                delivered += 1
        if match.queues:
            for members in match.queues:
                chosen = self._deliver_queue(members, skip, subject, reply, hdr, data)
                if chosen is True:
                    delivered += 1
                elif chosen is not None:
                    if remote is None:
                        remote = {}
                    remote.setdefault(chosen, []).append(members[0].queue or "")
        if remote:
            for route, queues in remote.items():
                route.forward(account, subject, reply, hdr, data, queues, route_by)
            delivered += len(remote)
        if delivered:
            acc_stats.out_msgs += delivered
            acc_stats.out_bytes += size * delivered
        elif reply and sender is not None and sender.no_responders:
            self._no_responders(sender, subject, reply)
        return delivered

    def route_answers(self, account: Account, answers: Sequence[tuple[str, bytes]]) -> None:
        """Messages from server components without reply or headers, in order (the PubAcks
        of one commit): as ``route_message`` for each, with the subject matched once per
        stretch of equal subjects (or of reply subjects of one inbox, see
        ``SubList.match_family``), the account counted once, what goes to another server
        in one ANSWERS frame per route (``forward_answers``), and a stretch whose only
        local receiver is one subscription (a publisher's inbox) written to it in one call
        (``deliver_answers``)."""
        sublist = account.sublist
        last: str | None = None
        stem: str | None = None  # the answer holds for "<stem><token>" while gen is current
        gen = -1
        last_match: Match[Subscription] | None = None
        local: list[Subscription] = []
        routes: list[RouteSubscriber] = []
        simple = False
        remote: dict[RouteSubscriber, tuple[list[str], list[bytes]]] = {}
        in_msgs = in_bytes = out_msgs = out_bytes = 0
        # The one local subscription of the current match, when that is all there is, its
        # owner ``frames_answers`` and it has no message limit (a limit ends it during
        # delivery: those go one by one, each subject matched after the last delivery);
        # answers[held:i] wait for it.
        one: Subscription | None = None
        held = 0
        for i in range(len(answers)):
            subject, data = answers[i]
            if subject != last:
                last = subject
                if not (
                    stem is not None
                    and gen == sublist.generation
                    and subject.startswith(stem)
                    and subject.find(".", len(stem)) < 0
                    and len(subject) > len(stem)
                ):
                    match, stem = sublist.match_family(subject)
                    gen = sublist.generation
                    if match is not last_match:  # unique reply subjects often share one
                        if one is not None and held < i:
                            msgs, size = one.conn.deliver_answers(one, answers, held, i)
                            out_msgs += msgs
                            out_bytes += size
                        held = i
                        last_match = match
                        simple = not match.queues
                        local = [s for s in match.plain if not s.conn.is_route]
                        one = local[0] if len(local) == 1 else None
                        if one is not None and (one.max_msgs or not one.conn.frames_answers):
                            one = None
                        # One copy per route, however many of its subscriptions match.
                        routes = list(dict.fromkeys(
                            cast(RouteSubscriber, s.conn) for s in match.plain if s.conn.is_route
                        ))
            if not simple:
                self.route_message(None, account, subject, None, None, data)
                held = i + 1
                continue
            size = len(data)
            in_msgs += 1
            in_bytes += size
            if one is None:
                for sub in local:
                    if sub.conn.deliver(sub, subject, None, None, data):
                        out_msgs += 1
                        out_bytes += size
            for route in routes:
                out = remote.get(route)
                if out is None:
                    out = remote[route] = ([], [])
                out[0].append(subject)
                out[1].append(data)
                out_msgs += 1
                out_bytes += size
        if one is not None and held < len(answers):
            msgs, size = one.conn.deliver_answers(one, answers, held, len(answers))
            out_msgs += msgs
            out_bytes += size
        for route, (subjects, bodies) in remote.items():
            route.forward_answers(account, subjects, bodies)
        account.stats.add(in_msgs, in_bytes, out_msgs, out_bytes)

    def route_replies(
        self, account: Account, subject: str, items: Sequence[tuple[bytes | None, bytes]]
    ) -> int:
        """Messages (header block or None, payload) from a server component to one subject
        without reply, in order (a slice of a DIRECT.GET batch): as ``route_message`` for
        each, matched once while the interest stays as it was. Stops at the first message
        nobody took; returns how many receivers took the last one (0: nobody listens).
        When the one receiver is a plain subscription of an owner that ``frames_answers``
        (the requester's inbox), the whole slice goes to it in one call."""
        match = account.sublist.match(subject)
        plain = match.plain
        if items and not match.queues and len(plain) == 1:
            sub = plain[0]
            conn = sub.conn
            if conn.frames_answers and not conn.is_route and not sub.max_msgs:
                # Delivering cannot change who is subscribed here but by closing, which
                # stops the slice: what the per-message matching below would find too.
                msgs, size = conn.deliver_replies(sub, subject, items)
                in_msgs, in_bytes = msgs, size
                if msgs < len(items):  # the message nobody took is counted in, as below
                    hdr, data = items[msgs]
                    in_msgs += 1
                    in_bytes += len(data) if hdr is None else len(hdr) + len(data)
                account.stats.add(in_msgs, in_bytes, msgs, size)
                return 1 if msgs == len(items) else 0
        routed = [(subject, None, hdr, data) for hdr, data in items]
        return self._route_matched(account, subject, routed, stop_unheard=True)

    def route_deliveries(
        self,
        account: Account,
        route_by: str,
        items: Sequence[tuple[str, str | None, bytes | None, bytes]],
    ) -> None:
        """Messages (subject, reply, header block or None, payload) from a server component,
        all routed by ``route_by`` and shown with their own subjects (a pull request's
        JetStream deliveries): as ``route_message`` for each, matched once while the
        interest stays as it was."""
        self._route_matched(account, route_by, items, stop_unheard=False)

    def _route_matched(
        self,
        account: Account,
        route_by: str,
        items: Sequence[tuple[str, str | None, bytes | None, bytes]],
        *,
        stop_unheard: bool,
    ) -> int:
        """``route_message`` for each of ``items``, ``route_by`` matched once per change of
        the interest; local plain subscribers take them directly (queue groups and routes:
        ``route_message``). Returns how many receivers took the last message."""
        sublist = account.sublist
        gen = -1
        plain: tuple[Subscription, ...] = ()
        simple = False
        got = in_msgs = in_bytes = out_msgs = out_bytes = 0
        for subject, reply, hdr, data in items:
            if gen != sublist.generation:
                match = sublist.match(route_by)
                gen = sublist.generation
                plain = match.plain
                simple = not match.queues and not any(s.conn.is_route for s in plain)
            if simple:
                size = len(data) if hdr is None else len(data) + len(hdr)
                in_msgs += 1
                in_bytes += size
                got = 0
                for sub in plain:
                    if sub.conn.deliver(sub, subject, reply, hdr, data):
                        got += 1
                out_msgs += got
                out_bytes += size * got
            else:
                got = self.route_message(None, account, subject, reply, hdr, data, route_by)
            if not got and stop_unheard:
                break
        account.stats.add(in_msgs, in_bytes, out_msgs, out_bytes)
        return got

    def route_pubs(self, sender: Publisher, account: Account, batch: PubBatch) -> int:
        """Route the publishes of one client read (a ``ClientParser`` batch), in order;
        returns the bytes published.

        Consecutive runs on one subject form a group (their replies may differ: requests,
        JetStream publishes with one reply subject each), and so do runs on subjects that
        one answer of the sublist covers (JetStream acks, one subject each: see
        ``SubList.match_prefix``): matched once and handed to each local subscriber in one
        call (which writes each run as one piece), and to each route with plain interest in
        one frame per stretch of one subject and one reply. Queue groups take each
        message on its own. A publisher that wants no-responders notices gets one for each
        request nobody took (subscribers always take the first messages of a group they are
        handed); with queue groups in the match its requests go one by one.
        """
        sublist = account.sublist
        skip: object = None if sender.echo else sender
        no_responders = sender.no_responders
        lines, starts, bodies = batch.lines, batch.starts, batch.bodies
        runs = len(lines)
        r = 0
        in_msgs = in_bytes = out_msgs = out_bytes = 0
        one_by_one = 0  # bytes routed (and counted) by the calls for single requests
        while r < runs and not sender.closed:
            line = lines[r]
            match, q = _group(sublist, lines, r)
            k = starts[q] - starts[r]
            notices = no_responders and any(lines[x][1] is not None for x in range(r, q))
            if notices and k > 1 and match.queues:
                for ln, body in batch.messages(r, q):
                    one_by_one += self.route_pubs(sender, account, PubBatch.single(ln, body))
                r = q
                continue
            size = line[2] * k if q == r + 1 else sum(map(len, bodies[starts[r] : starts[q]]))
            in_msgs += k
            in_bytes += size
            got = covered = 0  # deliveries; messages (the first ones) someone took
            routed = False
            for sub in match.plain:
                conn = sub.conn
                if conn.is_route:
                    routed = True
                elif conn is not skip:
                    g = conn.deliver_run(sub, batch, r, q, k, size)
                    if g:
                        got += g
                        covered = max(covered, g)
                        out_bytes += size if g == k else _leading_bytes(batch, r, g)
            if match.queues:
                g, g_bytes = self._route_each(account, match, batch, r, q, skip)
                got += g
                out_bytes += g_bytes
                if g:
                    covered = k  # k == 1 here when notices matter (see above)
            elif routed:
                # Plain interest only: each route gets the whole group at once.
                for route in {s.conn: None for s in match.plain if s.conn.is_route}:
                    cast(RouteSubscriber, route).forward_runs(account, batch, r, q)
                    got += k
                    out_bytes += size
                covered = k
            if got:
                out_msgs += got
            if notices and covered < k:
                self._notices(sender, batch, r, q, covered)
            r = q
        account.stats.add(in_msgs, in_bytes, out_msgs, out_bytes)
        return in_bytes + one_by_one

    def _notices(
        self, sender: Publisher, batch: PubBatch, first: int, stop: int, taken: int
    ) -> None:
        """No-responders notices for the requests of runs ``first`` to ``stop`` after the
        first ``taken`` messages."""
        lines, starts = batch.lines, batch.starts
        idx = 0
        for x in range(first, stop):
            subject, reply = lines[x][0], lines[x][1]
            for _ in range(starts[x], starts[x + 1]):
                if idx >= taken and reply is not None:
                    self._no_responders(sender, subject, reply)
                idx += 1

    def deliver_answers_from_route(
        self, account: Account, subjects: Sequence[str], bodies: Sequence[bytes]
    ) -> None:
        """Answers another server's components sent here (``forward_answers``): local plain
        subscribers only, as ``deliver_from_route`` without queue groups."""
        sublist = account.sublist
        last: str | None = None
        local: list[Subscription] = []
        in_bytes = out_msgs = out_bytes = 0
        for subject, data in zip(subjects, bodies, strict=True):
            if subject != last:
                last = subject
                local = [s for s in sublist.match(subject).plain if not s.conn.is_route]
            size = len(data)
            in_bytes += size
            for sub in local:
                if sub.conn.deliver(sub, subject, None, None, data):
                    out_msgs += 1
                    out_bytes += size
        account.stats.add(len(bodies), in_bytes, out_msgs, out_bytes)

    def deliver_pubs_from_route(self, account: Account, batch: PubBatch) -> int:
        """Deliver client publishes that another server routed here
        (``RouteSubscriber.forward_run``/``forward_runs``): local plain subscribers only,
        in groups as ``route_pubs`` makes them."""
        lines, starts = batch.lines, batch.starts
        runs = len(lines)
        sublist = account.sublist
        in_msgs = in_bytes = got = out_bytes = 0
        r = 0
        while r < runs:
            match, q = _group(sublist, lines, r)
            k = starts[q] - starts[r]
            size = sum(map(len, batch.bodies[starts[r] : starts[q]]))
            in_msgs += k
            in_bytes += size
            for sub in match.plain:
                conn = sub.conn
                if not conn.is_route:
                    g = conn.deliver_run(sub, batch, r, q, k, size)
                    if g:
                        got += g
                        out_bytes += size if g == k else _leading_bytes(batch, r, g)
            r = q
        account.stats.add(in_msgs, in_bytes, got, out_bytes)
        return got

    def _route_each(
        self,
        account: Account,
        match: Match[Subscription],
        batch: PubBatch,
        first: int,
        stop: int,
        skip: object,
    ) -> tuple[int, int]:
        """The queue groups and routes of runs ``first`` to ``stop`` of a batch, message by
        message (as ``route_message``). Returns (deliveries, bytes delivered)."""
        routes = [cast(RouteSubscriber, s.conn) for s in match.plain if s.conn.is_route]
        got = size = 0
        for line, body in batch.messages(first, stop):
            subject, reply = line[0], line[1]
            hdr, data = split_body(line, body)
            remote: dict[RouteSubscriber, list[str]] = {r: [] for r in routes}
            n = 0
            for members in match.queues:
                chosen = self._deliver_queue(members, skip, subject, reply, hdr, data)
                if chosen is True:
                    n += 1
                elif chosen is not None:
                    remote.setdefault(chosen, []).append(members[0].queue or "")
            for route, queues in remote.items():
                route.forward(account, subject, reply, hdr, data, queues, None)
            n += len(remote)
            got += n
            size += n * len(body)
        return got, size

    def deliver_from_route(
        self,
        account: Account,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        data: bytes,
        queues: Sequence[str],
        route_by: str | None,
    ) -> int:
        """Deliver a message another server routed here: local subscribers only, and of the
        queue groups only those the sender picked this server for."""
        size = len(data) if hdr is None else len(data) + len(hdr)
        account.stats.in_msgs += 1
        account.stats.in_bytes += size
        match = account.sublist.match(subject if route_by is None else route_by)
        delivered = 0
        for sub in match.plain:
            conn = sub.conn
            if not conn.is_route and conn.deliver(sub, subject, reply, hdr, data):
                delivered += 1
        if queues and match.queues:
            wanted = set(queues)
            for members in match.queues:
                if members[0].queue not in wanted:
                    continue
                local = tuple(m for m in members if not m.conn.is_route)
                if local and self._deliver_queue(local, None, subject, reply, hdr, data):
                    delivered += 1
        if delivered:
            account.stats.out_msgs += delivered
            account.stats.out_bytes += size * delivered
        return delivered

    def _deliver_queue(
        self,
        members: tuple[Subscription, ...],
        skip: object,
        subject: str,
        reply: str | None,
        hdr: bytes | None,
        data: bytes,
    ) -> RouteSubscriber | Literal[True] | None:
        """Give the message to one member: True when a local member took it, the route to
        forward it to when only remote members are left, None when nobody can take it."""
        n = len(members)
        start = self._rng.randrange(n) if n > 1 else 0
        routes: list[Subscription] | None = None
        # Start at a random member and walk on past anyone who cannot take it.
        for i in range(n):
            sub = members[(start + i) % n]
            conn = sub.conn
            if conn.is_route:
                if routes is None:
                    routes = []
                routes.append(sub)
                continue
            if skip is not None and conn is skip:
                continue
            if not conn.closed and conn.deliver(sub, subject, reply, hdr, data):
                return True
        if not routes:
            return None
        if len(routes) == 1:
            return cast(RouteSubscriber, routes[0].conn)
        weights = [max(s.weight, 1) for s in routes]
        return cast(RouteSubscriber, self._rng.choices(routes, weights)[0].conn)

    def pick_index(self, n: int) -> int:
        """Where a walk over ``n`` queue members starts (tracing's copy of the walk)."""
        return self._rng.randrange(n) if n > 1 else 0

    def no_responders(self, sender: Publisher, subject: str, reply: str) -> None:
        self._no_responders(sender, subject, reply)

    def _no_responders(self, sender: Publisher, subject: str, reply: str) -> None:
        owner: object = sender
        for sub in sender.account.sublist.match(reply).plain:
            if sub.conn is owner:
                hdr = encode_headers({"Nats-Subject": subject}, status=503)
                sender.enqueue(proto.encode_msg(reply, sub.sid, None, b"", hdr))
                return


def _group(
    sublist: SubList[Subscription], lines: list[PubLine], first: int
) -> tuple[Match[Subscription], int]:
    """The runs from ``first`` on that one sublist answer covers, and that answer: (match,
    the run after them). Consecutive runs on one subject, and then, when runs on other
    subjects follow (JetStream acks: a subject per message), those with the same stem
    (see ``SubList.match_prefix``)."""
    runs = len(lines)
    subject = lines[first][0]
    q = first + 1
    while q < runs and lines[q][0] is subject:
        q += 1
    if q == runs:
        return sublist.match(subject), q
    match, stem = sublist.match_prefix(subject)
    if stem is not None:
        cut = len(stem)
        while q < runs:
            nxt = lines[q][0]
            if len(nxt) <= cut or not nxt.startswith(stem):
                break
            q += 1
    return match, q


def _leading_bytes(batch: PubBatch, run: int, count: int) -> int:
    """The bytes of the first ``count`` messages from run ``run`` on."""
    first = batch.starts[run]
    return sum(map(len, batch.bodies[first : first + count]))


def totals(accounts: Sequence[Account]) -> AccountStats:
    total = AccountStats()
    for acc in accounts:
        total.in_msgs += acc.stats.in_msgs
        total.in_bytes += acc.stats.in_bytes
        total.out_msgs += acc.stats.out_msgs
        total.out_bytes += acc.stats.out_bytes
    return total
