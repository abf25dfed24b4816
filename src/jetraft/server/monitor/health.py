"""The health check (/healthz and the HEALTHZ system request), step by step as nats-server
checks: the request's sanity, the server, then JetStream (enabled, then its assets).

Options (query names, the same in the JSON of a system request): ``js-enabled-only`` stops
once JetStream is known to run, ``js-server-only`` does not look at JetStream at all,
``js-meta-only`` stops after the meta group (clustered), ``account``/``stream``/``consumer``
narrow the asset check, ``details`` lists every problem under ``errors`` instead of the first
one under ``error``. The body carries ``status_code``; the HTTP endpoint turns it into the
response status and drops it from the body, as nats-server does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jetraft.server.monitor.data import MonitoredServer, Query, flag

if TYPE_CHECKING:
    from jetraft.server.js.manager import JetStreamManager

_UNAVAILABLE = "unavailable"


@dataclass
class _Health:
    details: bool
    status: str = "ok"
    status_code: int = 0
    error: str = ""
    errors: list[dict[str, str]] = field(default_factory=list)

    def fail(self, kind: str, text: str, status: str = _UNAVAILABLE, code: int = 0,
             **where: str) -> None:
        if code:
            self.status_code = code
        if self.details:
            self.errors.append({"type": kind, **{k: v for k, v in where.items() if v},
                                "error": text})
        elif not self.error:
            self.status, self.error = status, text

    @property
    def failed(self) -> bool:
        return bool(self.error or self.errors)

    def body(self) -> dict[str, Any]:
        if self.details:
            self.status = "error" if self.errors else "ok"
        code = self.status_code or (503 if self.failed else 200)
        out: dict[str, Any] = {"status": self.status, "status_code": code}
        if self.error:
            out["error"] = self.error
        if self.errors:
            out["errors"] = self.errors
        return out


def healthz(server: MonitoredServer, q: Query) -> dict[str, Any]:
    h = _Health(details=flag(q, "details"))
    account, stream, consumer = q.get("account", ""), q.get("stream", ""), q.get("consumer", "")
    if stream and not account:
        h.fail("BAD_REQUEST", '"account" must not be empty when checking stream health',
               status="error", code=400)
    elif consumer and not stream:
        h.fail("BAD_REQUEST", '"stream" must not be empty when checking consumer health',
               status="error", code=400)
    elif not flag(q, "js-server-only") and server.config.jetstream is not None:
        js = server.jetstream
        if js is None:
            h.fail("JETSTREAM", "JetStream not enabled (10076)", code=503)
        elif not (flag(q, "js-enabled-only") or flag(q, "js-enabled")):
            if js.clustered is not None:
                _clustered(h, js, q, account, stream)
            else:
                _single(h, js, account, stream, consumer)
    return h.body()


def _single(h: _Health, js: JetStreamManager, account: str, stream: str, consumer: str) -> None:
    """One server: every stream and consumer found on disk must have been loaded."""
    if account and account not in js.accounts:
        h.fail("ACCOUNT", f'JetStream account "{account}" not found', code=404, account=account)
        return
    for name, acct in sorted(js.accounts.items()):
        if account and name != account:
            continue
        for sname, why in sorted(acct.offline.items()):
            if not stream or sname == stream:
                h.fail("STREAM", f"JetStream stream '{name} > {sname}' could not be recovered"
                       f": {why}", account=name, stream=sname)
        for sname, rt in sorted(acct.runtimes.items()):
            if stream and sname != stream:
                continue
            for cname, why in sorted(rt.consumers.offline.items()):
                if not consumer or cname == consumer:
                    h.fail("CONSUMER", f"JetStream consumer '{name} > {sname} > {cname}' "
                           f"could not be recovered: {why}", account=name, stream=sname,
                           consumer=cname)
    if h.failed or not account:
        return
    acct = js.accounts[account]
    if stream and stream not in acct.streams and stream not in acct.offline:
        h.fail("STREAM", f'JetStream stream "{stream}" not found on account "{account}"',
               code=404, account=account, stream=stream)
    elif consumer:
        found = acct.runtimes.get(stream)
        if found is None or (found.consumers.get(consumer) is None
                             and consumer not in found.consumers.offline):
            h.fail("CONSUMER", f'JetStream consumer "{consumer}" not found for stream '
                   f'"{stream}" on account "{account}"', code=404, account=account,
                   stream=stream, consumer=consumer)


def _clustered(h: _Health, js: JetStreamManager, q: Query, account: str, stream: str) -> None:
    """A cluster: the meta group must have a leader; the stream groups this server belongs
    to must run and have a leader."""
    cl = js.clustered
    assert cl is not None
    if not cl.meta.leader:
        h.fail("JETSTREAM", "JetStream has not established contact with a meta leader")
        return
    if flag(q, "js-meta-only"):
        return
    replicas = [r for (acc, name), r in sorted(cl.streams.items())
                if (not account or acc == account) and (not stream or name == stream)]
    if account and account not in cl.apis:
        h.fail("ACCOUNT", f'JetStream account "{account}" not found', code=404, account=account)
        return
    if stream and not replicas:
        h.fail("STREAM", f'JetStream stream "{stream}" not found on account "{account}"',
               code=404, account=account, stream=stream)
        return
    for r in replicas:
        acc, name = r.key
        problem = r.group.failed or r.group.corrupt or ("" if r.leader else "no leader")
        if problem:
            h.fail("STREAM", f"JetStream stream '{acc} > {name}' is not current: {problem}",
                   account=acc, stream=name)
