"""JetStream on a server: which accounts have it, the ``$JS.API`` subscription of each, and
the streams (created, loaded on start, closed on stop).

Enabled when the config has a ``jetstream`` block (or ``-js``). As in nats-server, with no
accounts configured the global account gets JetStream; with accounts configured only those
whose block enables ``jetstream`` do; the system account never does. Other accounts get
10039 "JetStream not enabled for account" to API requests (503 no responders for DIRECT.GET
and MSG.NEXT, which have no responder there), as nats-server answers them.

Each account's ``JsAccount`` is the context the API handlers (``stream_api``, ``consumer_api``)
work through; it implements both their Protocols.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jetraft.config import ServerConfig
from jetraft.jetstream import errors as E
from jetraft.jetstream.api import ApiTable, build_table, error_response, normalise_subject
from jetraft.jetstream.api_types import ApiStats
from jetraft.jetstream.consumer_config import StreamFacts
from jetraft.jetstream.models import encode_json, format_time
from jetraft.jetstream.store.cipher import RecordCipher
from jetraft.jetstream.store.types import StoreError
from jetraft.jetstream.stream import Entry, Result, Stream, UpdateConfig
from jetraft.jetstream.stream_config import StreamConfig
from jetraft.protocol.headers import encode_headers
from jetraft.server.core.accounts import Account
from jetraft.server.core.internal import InternalClient
from jetraft.server.core.router import Router
from jetraft.server.js.advisories import action_advisories, doomed_consumers, existed_before
from jetraft.server.js.commit import POOL as COMMIT_POOL
from jetraft.server.js.commit import Barrier, CommitAbandoned, collect, note_job
from jetraft.server.js.consumers import StreamConsumers
from jetraft.server.js.host import JsHost
from jetraft.server.js.limits import check_stream_limits, limits_body
from jetraft.server.js.replies import send_response
from jetraft.server.js.store_glue import (
    Encryption,
    MetaError,
    StreamMeta,
    account_dir,
    clear_trash,
    load_cipher,
    new_stream_files,
    open_store,
    read_meta,
    remove_stream_dir,
    set_aside_unfinished,
    unfinished_create,
    write_meta,
)
from jetraft.server.js.streams import StreamRuntime

if TYPE_CHECKING:
    from jetraft.server.js.clustered.jetstream import ClusteredJetStream

log = logging.getLogger("jetraft.js")

GLOBAL_ACCOUNT = "$G"

# The error a request kind answers with when its change could not be made durable
# (nats-server's: purge and consumer delete report a general stream error).
_FAILURE_CODES = {
    "stream_create_response": 10049,
    "stream_update_response": 10069,
    "stream_delete_response": 10050,
    "stream_purge_response": 10051,
    "stream_msg_delete_response": 10057,
    "consumer_create_response": 10012,
    "consumer_delete_response": 10051,
}


def system_account_name(config: ServerConfig) -> str:
    return "" if config.no_system_account else config.system_account


def enabled_accounts(config: ServerConfig, accounts: Mapping[str, Account]) -> list[Account]:
    """The accounts that get JetStream (see the module doc)."""
    system = system_account_name(config)
    configured = [a for a in config.accounts if a.name not in (GLOBAL_ACCOUNT, system)]
    if not configured:
        acc = accounts.get(GLOBAL_ACCOUNT)
        return [acc] if acc is not None else []
    out = []
    for acfg in configured:
        if acfg.jetstream is not None and acfg.name in accounts:
            out.append(accounts[acfg.name])
    return out


class JsAccount:
    """JetStream of one account: the API context and the account's streams."""

    def __init__(self, manager: JetStreamManager, account: Account) -> None:
        self.manager = manager
        self.server: JsHost = manager.server
        self.router: Router = manager.server.router
        self.account: Account = account
        self.rng: random.Random = random.Random()
        self.table: ApiTable = build_table()
        self.api_client = InternalClient(self.server.router, account, "jetstream api")
        self._streams: dict[str, Stream] = {}
        self.runtimes: dict[str, StreamRuntime] = {}
        self.offline: dict[str, str] = {}  # stream name -> why it could not be loaded
        self._deleting: set[str] = set()  # streams whose files are being removed
        self._creating: dict[str, asyncio.Future[None]] = {}  # creates still syncing
        js = manager.config
        self.sync_interval_ns = js.sync_interval_ns
        self.encryption = Encryption(js.encryption_key, js.cipher)
        self._domain = js.domain
        self.base_dir: Path | None = account_dir(js.store_dir, account.name)
        acfg = manager.server.config.account(account.name)
        self.account_limits = acfg.jetstream if acfg is not None else None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.api_client.subscribe("$JS.API.>", self._on_api)
        if self._domain:
            self.api_client.subscribe(f"$JS.{self._domain}.API.>", self._on_api)
        self._load_streams()

    async def stop(self) -> None:
        self.api_client.close()
        runtimes = list(self.runtimes.values())
        self.runtimes.clear()
        self._streams.clear()
        for rt in runtimes:
            await rt.close()

    def _load_streams(self) -> None:
        base = self.base_dir
        if base is None or not base.is_dir():
            return
        clear_trash(base)
        for stream_dir in sorted(p for p in base.iterdir() if p.is_dir()):
            name = stream_dir.name
            if name.startswith("."):  # trash, set-aside directories: never stream names
                continue
            try:
                cipher = load_cipher(self.encryption, self.account.name, stream_dir)
                meta = read_meta(stream_dir, cipher)
                store = open_store(meta.config, stream_dir, cipher)
            except (MetaError, StoreError, OSError) as exc:
                if unfinished_create(stream_dir):
                    aside = set_aside_unfinished(stream_dir)
                    log.warning(
                        "JetStream stream %s > %s: a create that never finished (%s); "
                        "its files were moved to %s",
                        self.account.name, name, exc, aside.name,
                    )
                    continue
                # Report, keep the files exactly as they are, and refuse to reuse the name.
                log.error("JetStream stream %s > %s not loaded: %s", self.account.name, name, exc)
                self.offline[name] = str(exc)
                continue
            stream = Stream(meta.config, store, meta.created_ns, self._domain)
            stream.recover()
            self._install(stream, stream_dir, cipher)
            log.info("Restored stream %s > %s", self.account.name, name)

    def _install(
        self,
        stream: Stream,
        stream_dir: Path | None,
        cipher: RecordCipher | None = None,
        created: asyncio.Future[None] | None = None,
    ) -> StreamRuntime:
        rt = StreamRuntime(self, stream, stream_dir, cipher, created)
        self._streams[stream.name] = stream
        self.runtimes[stream.name] = rt
        rt.start()
        return rt

    # --- API requests ------------------------------------------------------------------------

    def _on_api(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        api_subject = normalise_subject(subject, self._domain)
        if api_subject is None:
            return
        existed = existed_before(api_subject, self._exists)
        doomed = doomed_consumers(api_subject, self._consumers_of)
        # The answer leaves once every change the request made is durable (see ``commit``).
        with collect() as barrier:
            out = self.table.dispatch(self, api_subject, reply or "", hdr, data)
            if self._creating:
                self._after_creates(api_subject, barrier)
        if out is None:
            return
        if barrier.empty:
            self._send(reply or "", out)
            self._advise(api_subject, out, existed, doomed)
            return

        def answer(exc: BaseException | None) -> None:
            # A change whose stream or consumer was deleted while it synced was made, then
            # deleted: its answer stands (nats-server answers the create of an ephemeral
            # consumer that its inactive_threshold then removes). Only a failed sync is an
            # error.
            if exc is not None and not isinstance(exc, CommitAbandoned):
                self._send(reply or "", self._not_durable(api_subject, out, exc))
                return
            self._send(reply or "", out)
            self._advise(api_subject, out, existed, doomed)

        barrier.wait(answer)

    def _exists(self, stream: str, consumer: str) -> bool:
        found = self._streams.get(stream)
        return found is not None and (not consumer or consumer in found.consumers)

    def _consumers_of(self, stream: str) -> list[str]:
        found = self._streams.get(stream)
        return list(found.consumers) if found is not None else []

    def _advise(self, api_subject: str, out: Any, existed: bool, doomed: list[str]) -> None:
        now = time.time_ns()
        for advisory in action_advisories(api_subject, out, existed, doomed, now, self._domain):
            self.api_client.publish(*advisory)

    def _after_creates(self, api_subject: str, barrier: Barrier) -> None:
        """Nobody learns of a stream before its create is durable: an answer naming a stream
        whose create is still syncing (a repeated create, its info, a consumer on it) waits
        for that too. Matching any token is cheap and at worst waits a few milliseconds."""
        for token in api_subject.split(".")[2:]:
            fut = self._creating.get(token)
            if fut is not None and fut not in barrier.jobs:
                barrier.jobs.append(fut)

    def _not_durable(self, subject: str, out: Any, exc: BaseException) -> Any:
        """The answer for a request whose change could not be made durable: nats-server's
        error of that request kind, with the reason."""
        route = self.table.lookup(subject)
        kind = route.kind if route is not None else ""
        if not kind or not isinstance(out, dict):
            return out
        log.error("JetStream %s: change not durable: %s", subject, exc)
        self.table.stats.errors += 1
        return error_response(kind, E.api_error(_FAILURE_CODES.get(kind, 10051), err=str(exc)))

    def _send(self, reply: str, out: Any) -> None:
        send_response(self.api_client, reply, out)

    @property
    def max_pending(self) -> int:
        return self.server.config.max_pending

    # --- StreamApiContext --------------------------------------------------------------------

    @property
    def streams(self) -> Mapping[str, Stream]:
        return self._streams

    @property
    def api_stats(self) -> ApiStats:
        return self.table.stats

    @property
    def server_name(self) -> str:
        return self.server.name

    @property
    def domain(self) -> str:
        return self._domain

    @property
    def clustered(self) -> bool:
        return False

    @property
    def strict(self) -> bool:
        return self.manager.config.strict

    def now_ns(self) -> int:
        return time.time_ns()

    def limits(self) -> dict[str, Any]:
        return limits_body(self.manager.config, self.account_limits)

    def _check_account_limits(self, cfg: StreamConfig, creating: bool) -> None:
        check_stream_limits(self.account_limits, cfg, len(self._streams), creating)

    def _stream_dir(self, name: str, cfg: StreamConfig) -> Path | None:
        if self.base_dir is None or cfg.storage == "memory":
            return None
        return self.base_dir / name

    def create_stream(self, cfg: StreamConfig) -> Stream:
        if cfg.name in self.offline:
            raise E.api_error(10194, err=self.offline[cfg.name])
        if cfg.name in self._deleting:
            raise E.api_error(10049, err="stream is being deleted")
        self._check_account_limits(cfg, creating=True)
        stream_dir = self._stream_dir(cfg.name, cfg)
        created = self.now_ns()
        if stream_dir is not None and stream_dir.exists():
            # Left over by something we did not load: never overwrite it.
            raise E.api_error(10194, err=f"{stream_dir} already exists")
        cipher = None
        durable: Callable[[], None] | None = None
        try:
            if stream_dir is not None:
                meta = StreamMeta(cfg, created)
                cipher, durable = new_stream_files(
                    self.encryption, self.account.name, stream_dir, meta
                )
            store = open_store(cfg, stream_dir, cipher, created=True)
        except (OSError, StoreError) as exc:
            if stream_dir is not None:
                # Only what this request just created goes; nothing else is touched.
                with contextlib.suppress(OSError):
                    remove_stream_dir(stream_dir)
            raise E.api_error(10049, err=str(exc)) from None
        stream = Stream(cfg, store, created, self._domain)
        if cfg.first_seq > 1:
            store.purge(None, cfg.first_seq, 0)
        ready = None if durable is None else self._sync_created(cfg.name, durable)
        rt = self._install(stream, stream_dir, cipher, ready)
        if cfg.first_seq > 1:
            rt.commits.touch()  # the answer also waits for the purge to first_seq
        return stream

    def _sync_created(self, name: str, durable: Callable[[], None]) -> asyncio.Future[None]:
        """Run a create's fsyncs in a worker thread; returns their future (the gate of the
        stream's commits). The request being handled waits for them (``note_job``), and so
        does every API answer about the stream until they are done (``_on_api``). If they
        fail, the stream goes again before the requester hears the error."""
        loop = asyncio.get_running_loop()
        synced = loop.run_in_executor(COMMIT_POOL, durable)

        async def settle() -> None:
            try:
                await synced
            except BaseException:
                rt = self.runtimes.get(name)
                if rt is not None and rt.created is synced:
                    await asyncio.wait([self._delete(rt.stream)])
                raise
            finally:
                if self._creating.get(name) is job:
                    del self._creating[name]

        job = note_job(settle(), f"creating stream {name}")
        self._creating[name] = job
        return synced

    def update_stream(self, stream: Stream, cfg: StreamConfig) -> None:
        self._check_account_limits(cfg, creating=False)
        rt = self.runtimes[stream.name]
        stream_dir = rt.stream_dir
        if stream_dir is not None:
            try:
                write_meta(stream_dir, StreamMeta(cfg, stream.created_ns), rt.cipher)
            except OSError as exc:
                raise E.api_error(10069, err=str(exc)) from None
        result = rt.propose(UpdateConfig(cfg))
        if result.error is not None:
            raise result.error
        rt.config_changed()

    def delete_stream(self, stream: Stream) -> None:
        """Stop the stream now; the answer waits until its files' removal is durable. A
        failed removal is reported to the requester, and the name stays reserved (offline)
        so that nothing is created over the remains."""
        self._delete(stream)

    def _delete(self, stream: Stream) -> asyncio.Future[None]:
        name = stream.name
        rt = self.runtimes.pop(name)
        self._streams.pop(name, None)
        self._deleting.add(name)

        def removed(fut: asyncio.Future[None]) -> None:
            self._deleting.discard(name)
            exc = None if fut.cancelled() else fut.exception()
            if exc is not None:
                self.offline[name] = f"delete failed: {exc}"

        fut = rt.delete()
        fut.add_done_callback(removed)
        return fut

    def propose(self, stream: Stream, entry: Entry) -> Result:
        return self.runtimes[stream.name].propose(entry)

    def consumer_count(self, stream: str) -> int:
        rt = self.runtimes.get(stream)
        return len(rt.consumers.consumers) if rt is not None else 0

    # --- consumer ApiContext -----------------------------------------------------------------

    def stream_consumers(self, stream: str) -> tuple[StreamFacts, StreamConsumers] | None:
        rt = self.runtimes.get(stream)
        if rt is None:
            return None
        return rt.facts(), rt.consumers

    def persistent(self, stream: str) -> bool:
        rt = self.runtimes.get(stream)
        return rt is not None and rt.consumer_dir() is not None

    # --- monitoring --------------------------------------------------------------------------

    def usage(self) -> dict[str, int]:
        memory = storage = messages = nbytes = consumers = 0
        for name, stream in self._streams.items():
            st = stream.store.state()
            messages += st.msgs
            nbytes += st.bytes
            if stream.config.storage == "memory":
                memory += st.bytes
            else:
                storage += st.bytes
            consumers += self.consumer_count(name)
        return {
            "memory": memory,
            "storage": storage,
            "streams": len(self._streams),
            "consumers": consumers,
            "messages": messages,
            "bytes": nbytes,
        }


class DisabledAccount:
    """An account without JetStream: API requests get 10039, as from nats-server. In a
    cluster only one server answers (``answers``: the meta leader's rule)."""

    def __init__(
        self, server: JsHost, account: Account, answers: Callable[[], bool] | None = None
    ) -> None:
        self.table = build_table()
        self.answers = answers
        self.client = InternalClient(server.router, account, "jetstream disabled")
        self.client.subscribe("$JS.API.>", self._on_api)

    def _on_api(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        route = self.table.lookup(subject)
        if route is None or not reply or (self.answers is not None and not self.answers()):
            return
        if route.kind:
            body = encode_json(error_response(route.kind, E.api_error(10039)))
            self.client.publish(reply, body)
        else:
            self.client.publish(reply, b"", None, encode_headers((), 503))

    def close(self) -> None:
        self.client.close()


class JetStreamManager:
    """Starts JetStream for the enabled accounts and answers /jsz."""

    def __init__(self, server: JsHost) -> None:
        assert server.config.jetstream is not None
        self.server = server
        self.config = server.config.jetstream
        self.accounts: dict[str, JsAccount] = {}
        self.disabled: list[DisabledAccount] = []
        self.clustered: ClusteredJetStream | None = None

    async def start(self) -> None:
        store_dir = Path(self.config.store_dir)
        log.info("Starting JetStream, store directory %s", store_dir / "jetstream")
        cfg, accounts = self.server.config, self.server.auth.accounts
        if self.server.mesh is not None:
            await self._start_clustered()
            return
        for account in enabled_accounts(cfg, accounts):
            acct = JsAccount(self, account)
            self.accounts[account.name] = acct
            acct.start()
        system = system_account_name(cfg)
        for name, account in accounts.items():
            if name not in self.accounts and name != system:
                self.disabled.append(DisabledAccount(self.server, account))

    async def _start_clustered(self) -> None:
        # Imported here: a single server does not need the cluster's modules at all.
        from jetraft.server.js.clustered.jetstream import ClusteredJetStream

        cfg, accounts = self.server.config, self.server.auth.accounts
        enabled = enabled_accounts(cfg, accounts)
        clustered = ClusteredJetStream(self.server, enabled)
        self.clustered = clustered
        await clustered.start()
        system = system_account_name(cfg)
        names = {a.name for a in enabled}
        for name, account in accounts.items():
            if name not in names and name != system:
                self.disabled.append(DisabledAccount(self.server, account, clustered.answers_meta))

    async def lame_duck(self) -> None:
        """Hand this server's leaderships away before it goes (clustered only)."""
        if self.clustered is not None:
            await self.clustered.hand_over()

    async def stop(self) -> None:
        if self.clustered is not None:
            await self.clustered.stop()
        for acct in self.accounts.values():
            await acct.stop()
        self.accounts.clear()
        for disabled in self.disabled:
            disabled.close()
        self.disabled.clear()

    def raftz(self, q: Mapping[str, str]) -> dict[str, Any]:
        """The /raftz body: the RAFT groups of a clustered server (none on one server)."""
        if self.clustered is None:
            return {}
        return self.clustered.raftz(q.get("acc", ""), q.get("group", ""))

    def jsz(self, q: Mapping[str, str]) -> dict[str, Any]:
        """The /jsz monitoring body (nats-server's shape, the parts that apply)."""
        if self.clustered is not None:
            return self._clustered_jsz(self.clustered, q)
        totals = {
            "memory": 0,
            "storage": 0,
            "streams": 0,
            "consumers": 0,
            "messages": 0,
            "bytes": 0,
        }
        api_total = api_errors = 0
        details = []
        for name, acct in sorted(self.accounts.items()):
            usage = acct.usage()
            for key in totals:
                totals[key] += usage[key]
            api_total += acct.table.stats.total
            api_errors += acct.table.stats.errors
            if q.get("accounts") in ("1", "true") or q.get("streams") in ("1", "true"):
                details.append(self._account_detail(name, acct, usage, q))
        out = self._jsz_body(
            totals, len(self.accounts), 0, api_total, api_errors
        )
        if details:
            out["account_details"] = details
        return out

    def _jsz_body(
        self, totals: dict[str, int], accounts: int, ha_assets: int, api_total: int,
        api_errors: int,
    ) -> dict[str, Any]:
        """/jsz's common part: config, usage totals, API counters."""
        from jetraft.jetstream.api_types import API_LEVEL

        js = self.config
        out: dict[str, Any] = {
            "server_id": self.server.server_id,
            "now": format_time(time.time_ns()),
            "config": {
                "max_memory": js.max_memory_store,
                "max_storage": js.max_file_store,
                "store_dir": str(Path(js.store_dir) / "jetstream"),
                "sync_interval": js.sync_interval_ns,
            },
            "limits": {},
            "memory": totals["memory"],
            "storage": totals["storage"],
            "reserved_memory": 0,
            "reserved_storage": 0,
            "accounts": accounts,
            "ha_assets": ha_assets,
            "api": {"level": API_LEVEL, "total": api_total, "errors": api_errors},
            "streams": totals["streams"],
            "consumers": totals["consumers"],
            "messages": totals["messages"],
            "bytes": totals["bytes"],
        }
        if js.domain:
            out["config"]["domain"] = js.domain
        if js.unique_tag:
            out["config"]["unique_tag"] = js.unique_tag
        return out

    def _clustered_jsz(self, cl: ClusteredJetStream, q: Mapping[str, str]) -> dict[str, Any]:
        """This server's replicas (what it stores), the meta group as it sees it."""
        totals = dict.fromkeys(("memory", "storage", "messages", "bytes"), 0)
        for replica in cl.streams.values():
            st = replica.stream.store.state()
            totals["messages"] += st.msgs
            totals["bytes"] += st.bytes
            totals["memory" if replica.stream.config.storage == "memory" else "storage"] += (
                st.bytes
            )
        totals["streams"], totals["consumers"] = len(cl.streams), len(cl.consumers)
        ha = sum(len(r.sa.peers) > 1 for r in cl.streams.values()) + sum(
            len(c.ca.peers) > 1 for c in cl.consumers.values()
        )
        total = sum(api.stats.total for api in cl.apis.values())
        errors = sum(api.stats.errors for api in cl.apis.values())
        out = self._jsz_body(totals, len(cl.apis), ha, total, errors)
        out["meta_cluster"] = cl.meta_cluster()
        if q.get("accounts") in ("1", "true") or q.get("streams") in ("1", "true"):
            out["account_details"] = cl.account_details(q.get("streams") in ("1", "true"))
        return out

    def _account_detail(
        self, name: str, acct: JsAccount, usage: dict[str, int], q: Mapping[str, str]
    ) -> dict[str, Any]:
        detail: dict[str, Any] = {
            "name": name,
            "id": name,
            "memory": usage["memory"],
            "storage": usage["storage"],
            "api": {"total": acct.table.stats.total, "errors": acct.table.stats.errors},
        }
        if q.get("streams") in ("1", "true"):
            from jetraft.jetstream.stream_api import stream_info

            detail["stream_detail"] = [
                {"name": s.name, **stream_info(acct, s, with_cluster=False)}
                for _, s in sorted(acct.streams.items())
            ]
        if acct.offline:
            detail["offline_streams"] = dict(acct.offline)
        consumers = {
            name: dict(rt.consumers.offline)
            for name, rt in sorted(acct.runtimes.items())
            if rt.consumers.offline
        }
        if consumers:
            detail["offline_consumers"] = consumers
        return detail
