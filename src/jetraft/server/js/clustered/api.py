"""The ``$JS.API`` of one account on a server of a cluster: who answers what (see
``jetstream.py``'s module doc) and the handlers that differ from a single server's.

Read handlers of a stream leader (INFO, MSG.GET, DIRECT.GET) are the single-server ones
run over a view of that one stream; changes (PURGE, MSG.DELETE) are proposed to the
stream's group and answered once committed and applied. The meta leader's handlers
(``meta_api``) validate, place and propose assignments.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from jetraft.jetstream import consumer_api, stream_api
from jetraft.jetstream import errors as E
from jetraft.jetstream.api import Route, build_table, error_response, normalise_subject
from jetraft.jetstream.api_types import (
    API_LEVEL,
    REQUIRED_LEVEL_HEADER,
    TYPE_PREFIX,
    ApiStats,
    StatusReply,
)
from jetraft.jetstream.direct_get import handle_direct_get, handle_direct_get_last
from jetraft.jetstream.errors import ApiError
from jetraft.jetstream.stream import Entry, Result, Stream
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.protocol.headers import header_value
from jetraft.raft.ready import RaftError
from jetraft.server.core.accounts import Account
from jetraft.server.core.internal import InternalClient
from jetraft.server.js.clustered import meta_api
from jetraft.server.js.clustered.stream_replica import StreamReplica
from jetraft.server.js.limits import limits_body
from jetraft.server.js.replies import send_response

if TYPE_CHECKING:
    from jetraft.server.js.clustered.consumer_replica import ConsumerReplica
    from jetraft.server.js.clustered.jetstream import ClusteredJetStream

log = logging.getLogger("jetraft.js.api")

# Patterns (relative to $JS.API.) by who answers them.
META_OWNED = frozenset(
    {
        "INFO",
        "STREAM.CREATE.*",
        "STREAM.UPDATE.*",
        "STREAM.DELETE.*",
        "STREAM.NAMES",
        "STREAM.LIST",
        "STREAM.PEER.REMOVE.*",
        "CONSUMER.CREATE.*",
        "CONSUMER.CREATE.*.>",
        "CONSUMER.DURABLE.CREATE.*",
        "CONSUMER.DURABLE.CREATE.*.>",
        "CONSUMER.DELETE.*.*",
        "CONSUMER.NAMES.*",
        "CONSUMER.LIST.*",
        "CONSUMER.PAUSE.*.*",
    }
)
CONSUMER_OWNED = frozenset(
    {"CONSUMER.INFO.*.*", "CONSUMER.LEADER.STEPDOWN.*.*", "CONSUMER.UNPIN.*.*"}
)
# Pull requests go straight to the consumer's leader, which subscribes to them itself.
SELF_SERVED = frozenset({"CONSUMER.MSG.NEXT.*.*"})
STREAM_OWNED = frozenset(
    {
        "STREAM.INFO.*",
        "STREAM.PURGE.*",
        "STREAM.MSG.GET.*",
        "STREAM.MSG.DELETE.*",
        "STREAM.LEADER.STEPDOWN.*",
    }
)
DIRECT = frozenset({"DIRECT.GET.*", "DIRECT.GET.*.>"})
# Without a meta leader, wait this long before saying so: a leader elected meanwhile (or one
# this server has not heard of yet) answers instead.
LEADERLESS_WAIT_S = 1.0


class StreamView:
    """``stream_api.StreamApiContext`` over one replicated stream (read handlers only)."""

    def __init__(self, api: ClusterApi, replica: StreamReplica) -> None:
        self.api = api
        self.replica = replica

    @property
    def streams(self) -> Mapping[str, Stream]:
        return {self.replica.name: self.replica.stream}

    @property
    def api_stats(self) -> ApiStats:
        return self.api.stats

    @property
    def server_name(self) -> str:
        return self.api.js.server_name

    @property
    def domain(self) -> str:
        return self.api.js.domain

    @property
    def clustered(self) -> bool:
        return True

    @property
    def max_pending(self) -> int:
        return self.api.js.server.config.max_pending

    @property
    def strict(self) -> bool:
        return self.api.js.config.strict

    def now_ns(self) -> int:
        return time.time_ns()

    def limits(self) -> dict[str, Any]:
        return self.api.limits()

    def consumer_count(self, stream: str) -> int:
        return self.api.consumer_count(stream)

    def create_stream(self, cfg: StreamConfig) -> Stream:
        raise RuntimeError("streams are created by the meta leader")

    def update_stream(self, stream: Stream, cfg: StreamConfig) -> None:
        raise RuntimeError("streams are updated through their assignment")

    def delete_stream(self, stream: Stream) -> None:
        raise RuntimeError("streams are deleted by the meta leader")

    def propose(self, stream: Stream, entry: Entry) -> Result:
        raise RuntimeError("changes are proposed to the stream's group")


class ClusterApi:
    def __init__(self, js: ClusteredJetStream, account: Account) -> None:
        self.js = js
        self.account = account
        self.client = InternalClient(js.router, account, f"jetstream api {account.name}")
        self.table = build_table()
        self.stats = ApiStats()
        acfg = js.server.config.account(account.name)
        self.account_limits = acfg.jetstream if acfg is not None else None
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self.client.subscribe("$JS.API.>", self._on_api)
        if self.js.domain:
            self.client.subscribe(f"$JS.{self.js.domain}.API.>", self._on_api)

    def stop(self) -> None:
        self.client.close()
        for task in self._tasks:
            task.cancel()

    def limits(self) -> dict[str, Any]:
        return limits_body(self.js.config, self.account_limits)

    def consumer_count(self, stream: str) -> int:
        return len(self.js.meta.state.stream_consumers(self.account.name, stream))

    # --- routing -----------------------------------------------------------------------------

    def _on_api(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        api_subject = normalise_subject(subject, self.js.domain)
        if api_subject is None:
            return
        route = self.table.lookup(api_subject)
        if route is None or not reply:
            return
        pattern = route.pattern
        if pattern in META_OWNED:
            self._meta_request(route, api_subject, reply, hdr, data)
        elif pattern in STREAM_OWNED:
            self._stream_request(route, api_subject, reply, hdr, data)
        elif pattern in DIRECT:
            self._direct_fallback(api_subject, reply)
        elif pattern in CONSUMER_OWNED:
            self._consumer_request(route, api_subject, reply, hdr, data)
        elif pattern not in SELF_SERVED and self.js.answers_meta():
            self._reply(reply, error_response(route.kind, E.api_error(10010)), error=True)

    def _meta_request(
        self, route: Route, subject: str, reply: str, hdr: bytes | None, data: bytes
    ) -> None:
        meta = self.js.meta
        if meta.is_leader:
            if self._level_refused(route, hdr, reply):
                return
            work = meta_api.handle(self, route, subject, reply, data)
            self._spawn(self._answer(route.kind, reply, work))
        elif not meta.leader:
            self._spawn(self._leaderless(route.kind, reply))

    async def _leaderless(self, kind: str, reply: str) -> None:
        """No meta leader known here: wait for one a little. If the leader we knew comes
        back (we had only missed its heartbeats), it answered; if a new one was elected, it
        answers 10008 (the request reached it before it led); if there is still none, the
        smallest-named server does. The client retries on 10008."""
        meta = self.js.meta
        before = meta.last_leader
        deadline = time.monotonic() + LEADERLESS_WAIT_S
        while not meta.leader and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if meta.leader:
            if meta.last_leader == before or not meta.is_leader:
                return
        elif not self.js.answers_when_leaderless():
            return
        self._reply(reply, error_response(kind, E.api_error(10008)), error=True)

    def _level_refused(self, route: Route, hdr: bytes | None, reply: str) -> bool:
        if not hdr:
            return False
        level = header_value(hdr, REQUIRED_LEVEL_HEADER)
        if level is None:
            return False
        try:
            too_high = int(level.strip()) > API_LEVEL
        except ValueError:
            too_high = True
        if too_high:
            self._reply(reply, error_response(route.kind, E.api_error(10185)), error=True)
        return too_high

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, kind: str, reply: str, work: Coroutine[Any, Any, Any]) -> None:
        try:
            out = await work
        except ApiError as exc:
            out = error_response(kind, exc)
        except Exception:
            log.exception("JetStream API (%s) failed", kind)
            out = error_response(kind, E.api_error(10051, err="internal error"))
        if out is meta_api.ANSWERED:
            self.stats.total += 1  # the asset's leader sent the answer
            return
        is_error = isinstance(out, dict) and "error" in out
        self._reply(reply, out, error=is_error)

    def answer(self, reply: str, out: dict[str, Any]) -> None:
        """Send an answer another server prepared (a create answered by the new leader)."""
        send_response(self.client, reply, out)

    def _reply(self, reply: str, out: Any, *, error: bool = False) -> None:
        self.stats.total += 1
        if error:
            self.stats.errors += 1
        send_response(self.client, reply, out)

    # --- stream leader requests --------------------------------------------------------------

    def _stream_request(
        self, route: Route, subject: str, reply: str, hdr: bytes | None, data: bytes
    ) -> None:
        name = subject.rsplit(".", 1)[-1]
        replica = self.js.streams.get((self.account.name, name))
        # A replica whose removal this server already applied is not torn down yet (that
        # is queued behind its consumers): it no longer speaks for the stream.
        if (
            replica is None
            or not replica.is_leader
            or (self.account.name, name) not in self.js.meta.state.streams
        ):
            if (self.account.name, name) not in self.js.meta.state.streams and (
                self.js.answers_meta()
            ):
                extra = {"total": 0, "offset": 0, "limit": 0} if route.kind.startswith(
                    "stream_info"
                ) else {}
                body = E.error_body(TYPE_PREFIX + route.kind, E.stream_not_found(), **extra)
                self._reply(reply, body, error=True)
            return
        if self._level_refused(route, hdr, reply):
            return
        view = StreamView(self, replica)
        pattern = route.pattern
        if pattern == "STREAM.INFO.*":
            out = stream_api.handle_stream_info(view, subject, reply, data)
            if "error" not in out:
                out["cluster"] = replica.cluster_info()
                alternates = self._alternates(name)
                if alternates:
                    out["alternates"] = alternates
            self._reply(reply, out, error="error" in out)
        elif pattern == "STREAM.MSG.GET.*":
            out = stream_api.handle_msg_get(view, subject, reply, data)
            self._reply(reply, out, error="error" in out)
        elif pattern == "STREAM.PURGE.*":
            self._spawn(self._answer(route.kind, reply, self._purge(view, subject, data)))
        elif pattern == "STREAM.MSG.DELETE.*":
            self._spawn(self._answer(route.kind, reply, self._msg_delete(view, subject, data)))
        elif pattern == "STREAM.LEADER.STEPDOWN.*":
            self._spawn(self._answer(route.kind, reply, self._stream_stepdown(replica, data)))

    def _alternates(self, name: str) -> list[dict[str, str]]:
        """The stream and its mirrors, where a client may read it (nats-server lists them
        in a clustered stream's info when there is more than the stream itself)."""
        names = [name]
        for (account, other), sa in self.js.meta.state.streams.items():
            mirror = sa.config.mirror
            if account == self.account.name and mirror is not None and mirror.name == name:
                names.append(other)
        if len(names) == 1:
            return []
        extra = {"domain": self.js.domain} if self.js.domain else {}
        cluster = self.js.cluster_name
        return [{"name": n, **extra, "cluster": cluster} for n in [name, *sorted(names[1:])]]

    async def _purge(self, view: StreamView, subject: str, data: bytes) -> Any:
        try:
            _, entry = stream_api.purge_request(view, subject, data)
        except ApiError as exc:
            return E.error_body(TYPE_PREFIX + stream_api.PURGE_KIND, exc, purged=0)
        result = await self._commit(view.replica, entry, stream_api.PURGE_KIND)
        return stream_api.purge_response(result)

    async def _msg_delete(self, view: StreamView, subject: str, data: bytes) -> Any:
        _, entry = stream_api.msg_delete_request(view, subject, data)
        result = await self._commit(view.replica, entry, stream_api.MSG_DELETE_KIND)
        return stream_api.msg_delete_response(result)

    async def _commit(self, replica: StreamReplica, entry: Entry, kind: str) -> Result:
        """Propose and wait until committed and applied: the reply confirms a change that
        a quorum holds on disk."""
        try:
            return await replica.propose_and_wait(entry)
        except (RaftError, TimeoutError) as exc:
            raise E.api_error(10008) from exc

    async def _stream_stepdown(self, replica: StreamReplica, data: bytes) -> Any:
        kind = "stream_leader_stepdown_response"
        preferred = meta_api.preferred_from(data)
        try:
            replica.step_down(preferred)
        except RaftError as exc:
            raise E.api_error(10008) from exc
        return {"type": TYPE_PREFIX + kind, "success": True}

    # --- consumer leader requests ------------------------------------------------------------

    def _consumer_request(
        self, route: Route, subject: str, reply: str, hdr: bytes | None, data: bytes
    ) -> None:
        toks = subject.split(".")
        stream, name = toks[-2], toks[-1]
        key = (self.account.name, stream, name)
        replica = self.js.consumers.get(key)
        if replica is None or not replica.is_leader or key not in self.js.meta.state.consumers:
            state = self.js.meta.state
            if key not in state.consumers and self.js.answers_meta():
                missing = (
                    E.stream_not_found()
                    if (self.account.name, stream) not in state.streams
                    else E.api_error(10014)
                )
                self._reply(reply, error_response(route.kind, missing), error=True)
            return
        if self._level_refused(route, hdr, reply):
            return
        if route.pattern == "CONSUMER.INFO.*.*":
            try:
                out = {"type": TYPE_PREFIX + route.kind, **replica.info()}
            except RaftError:
                return  # lost leadership meanwhile: the new leader answers a retry
            self._reply(reply, out)
            return
        if route.pattern == "CONSUMER.UNPIN.*.*":
            self._unpin(replica, route.kind, reply, data)
            return
        try:
            replica.step_down(meta_api.preferred_from(data))
            out = {"type": TYPE_PREFIX + route.kind, "success": True}
        except RaftError as exc:
            out = error_response(route.kind, E.api_error(10008, err=str(exc)))
        self._reply(reply, out, error="error" in out)

    def _unpin(self, replica: ConsumerReplica, kind: str, reply: str, data: bytes) -> None:
        # The pin lives with the consumer's leader (as on nats-server): nothing to replicate.
        runtime = replica.runtime
        if runtime is None:
            return
        try:
            group = consumer_api.unpin_group(data, runtime.cfg)
        except ApiError as exc:
            self._reply(reply, error_response(kind, exc), error=True)
            return
        runtime.unpin(group)
        self._reply(reply, {"type": TYPE_PREFIX + kind})

    # --- direct get --------------------------------------------------------------------------

    def _direct_fallback(self, subject: str, reply: str) -> None:
        """Replicas of a stream with allow_direct answer DIRECT.GET in a queue group; for any
        other stream the meta leader answers 503, as if nobody served the subject."""
        name = subject.split(".")[4] if subject.count(".") >= 4 else ""
        sa = self.js.meta.state.streams.get((self.account.name, name))
        if sa is not None and sa.config.allow_direct:
            return
        if self.js.answers_meta():
            send_response(self.client, reply, StatusReply(503))

    def direct_get(self, replica: StreamReplica, subject: str, reply: str | None,
                   data: bytes) -> None:
        if not reply:
            return
        view = StreamView(self, replica)
        if subject.count(".") > 4:
            out = handle_direct_get_last(view, subject, reply, data)
        else:
            out = handle_direct_get(view, subject, reply, data)
        send_response(self.client, reply, out)

    # --- infos -------------------------------------------------------------------------------

    def stream_info(self, replica: StreamReplica) -> dict[str, Any]:
        info = stream_api.stream_info(StreamView(self, replica), replica.stream)
        info["cluster"] = replica.cluster_info()
        return info


class SystemApi:
    """Requests only the system account may make: META.LEADER.STEPDOWN, SERVER.REMOVE."""

    def __init__(self, js: ClusteredJetStream, account: Account) -> None:
        self.js = js
        self.client = InternalClient(js.router, account, "jetstream system api")
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self.client.subscribe("$JS.API.META.LEADER.STEPDOWN", self._on_stepdown)
        self.client.subscribe("$JS.API.SERVER.REMOVE", self._on_remove)

    def stop(self) -> None:
        self.client.close()

    def _on_stepdown(self, subject: str, reply: str | None, hdr: bytes | None,
                     data: bytes) -> None:
        if reply and self.js.meta.is_leader:
            kind = "meta_leader_stepdown_response"
            try:
                self.js.meta.step_down(meta_api.preferred_from(data))
                out = {"type": TYPE_PREFIX + kind, "success": True}
            except Exception as exc:
                out = error_response(kind, E.api_error(10008, err=str(exc)))
            send_response(self.client, reply, out)

    def _on_remove(self, subject: str, reply: str | None, hdr: bytes | None,
                   data: bytes) -> None:
        if reply and self.js.meta.is_leader:
            task = asyncio.ensure_future(self._remove(reply, data))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _remove(self, reply: str, data: bytes) -> None:
        out = await meta_api.server_remove(self.js, data)
        send_response(self.client, reply, out)
