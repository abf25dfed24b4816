"""``jetraft server check jetstream|stream``: health checks for monitoring systems.

Output is one Nagios line, ``OK JetStream OK:... | name=value;warn;crit ...``, and the exit
code is Nagios's: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN. ``--format json`` prints the same
result as JSON. The checks are computed here from plain API replies (account info, stream
infos), so they work against any server that answers the JetStream API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import click

from jetraft.cli import js
from jetraft.cli.conn import Api, connected, run
from jetraft.cli.errors import CliError
from jetraft.cli.group import group
from jetraft.cli.options import ConnOptions, connection
from jetraft.cli.render import print_json
from jetraft.cli.server_cmd import server
from jetraft.cli.units import NS_PER_S, parse_duration_ns

EXIT_CODES = {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}


@dataclass
class Check:
    name: str
    criticals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    oks: list[str] = field(default_factory=list)
    perf: list[tuple[str, float, str, float, float]] = field(default_factory=list)

    def metric(
        self, name: str, value: float, unit: str = "", warn: float = 0, crit: float = 0
    ) -> None:
        self.perf.append((name, value, unit, warn, crit))

    @property
    def status(self) -> str:
        return "CRITICAL" if self.criticals else "WARNING" if self.warnings else "OK"

    def nagios(self) -> str:
        parts = [self.name]
        parts += [f"Crit:{c}" for c in self.criticals]
        parts += [f"Warn:{w}" for w in self.warnings]
        if not self.criticals and not self.warnings:
            parts += [f"OK:{o}" for o in self.oks]
        line = f"{self.status} {' '.join(parts)}"
        if self.perf:
            line += " | " + " ".join(_perf_item(*p) for p in self.perf)
        return line

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "criticals": self.criticals,
            "warnings": self.warnings,
            "ok": self.oks,
            "perf_data": [
                {"name": n, "value": v, "unit": u, "warning": w, "critical": c}
                for n, v, u, w, c in self.perf
            ],
        }


def _perf_item(name: str, value: float, unit: str, warn: float, crit: float) -> str:
    fmt = "{:.4f}" if unit == "s" else "{:.0f}"
    text = f"{name}={fmt.format(value)}{unit}"
    if warn or crit:
        text += ";" + (fmt.format(warn) if warn else "")
        if crit:
            text += ";" + fmt.format(crit)
    return text


def finish(check: Check, output_format: str) -> int:
    if output_format == "json":
        print_json(check.as_json())
    else:
        print(check.nagios())
    return EXIT_CODES[check.status]


check = group("check", "Health checks with Nagios output and exit codes", parent=server)
FORMAT_OPT = click.option(
    "--format",
    "output_format",
    type=click.Choice(["nagios", "json"]),
    default="nagios",
    help="Output format",
)


def _level(check: Check, item: str, pct: int, warn: int, crit: int) -> None:
    if warn >= 0 and crit >= 0 and warn >= crit:
        check.criticals.append(f"{item}: invalid thresholds")
    elif pct > 100:
        check.criticals.append(f"{item}: exceed server limits")
    elif crit >= 0 and pct >= crit:
        check.criticals.append(f"{item} {pct}%")
    elif warn >= 0 and pct >= warn:
        check.warnings.append(f"{item} {pct}%")


def account_usage(
    check: Check, info: dict[str, Any], thresholds: dict[str, tuple[int, int]]
) -> None:
    limits = info.get("limits") or {}
    usage = {
        "memory": (int(info.get("memory") or 0), int(limits.get("max_memory") or -1)),
        "storage": (int(info.get("storage") or 0), int(limits.get("max_storage") or -1)),
        "streams": (int(info.get("streams") or 0), int(limits.get("max_streams") or -1)),
        "consumers": (int(info.get("consumers") or 0), int(limits.get("max_consumers") or -1)),
    }
    for item, (used, limit) in usage.items():
        pct = int(used / limit * 100) if limit > 0 else 0
        warn, crit = thresholds[item]
        check.metric(item, used, "B" if item in ("memory", "storage") else "")
        check.metric(f"{item}_pct", pct, "%", max(warn, 0), max(crit, 0))
        _level(check, item, pct, warn, crit)


def replica_health(info: dict[str, Any], seen_crit_s: float, lag_crit: int) -> str:
    """'' when the stream's RAFT group is healthy, else why not."""
    cfg, cluster = info.get("config") or {}, info.get("cluster") or {}
    replicas = int(cfg.get("num_replicas") or 1)
    if replicas == 1:
        return ""
    if not cluster.get("leader"):
        return "no leader"
    peers = cluster.get("replicas") or []
    if len(peers) != replicas - 1:
        return f"{len(peers) + 1} of {replicas} peers"
    for p in peers:
        if p.get("offline"):
            return f"{p.get('name')} offline"
        if seen_crit_s and int(p.get("active") or 0) > seen_crit_s * NS_PER_S:
            return f"{p.get('name')} not seen"
        if lag_crit and int(p.get("lag") or 0) > lag_crit:
            return f"{p.get('name')} lagging"
        if not p.get("current"):
            return f"{p.get('name')} not current"
    return ""


def _seconds(text: str, flag: str) -> float:
    try:
        return parse_duration_ns(text) / NS_PER_S
    except ValueError as exc:
        raise CliError(f"{flag}: {exc}", 2) from None


@check.command("jetstream", help="Check the account's JetStream usage and its streams' replicas")
@click.option("--mem-warn", default=75, help="Memory use warning, percent of the limit")
@click.option("--mem-critical", default=90, help="Memory use critical, percent of the limit")
@click.option("--store-warn", default=75, help="File storage warning, percent of the limit")
@click.option("--store-critical", default=90, help="File storage critical, percent of the limit")
@click.option("--streams-warn", default=-1, help="Streams warning, percent of the limit")
@click.option("--streams-critical", default=-1, help="Streams critical, percent of the limit")
@click.option("--consumers-warn", default=-1, help="Consumers warning, percent of the limit")
@click.option("--consumers-critical", default=-1, help="Consumers critical, percent of the limit")
@click.option(
    "--replicas/--no-replicas", default=True, help="Check the health of every stream's replicas"
)
@click.option(
    "--replica-seen-critical", default="5s", help="A replica not seen for this long is critical"
)
@click.option(
    "--replica-lag-critical", default=200, help="A replica this many operations behind is critical"
)
@FORMAT_OPT
@connection
def check_js_cmd(
    conn: ConnOptions,
    mem_warn: int,
    mem_critical: int,
    store_warn: int,
    store_critical: int,
    streams_warn: int,
    streams_critical: int,
    consumers_warn: int,
    consumers_critical: int,
    replicas: bool,
    replica_seen_critical: str,
    replica_lag_critical: int,
    output_format: str,
) -> int:
    seen_s = _seconds(replica_seen_critical, "--replica-seen-critical")
    thresholds = {
        "memory": (mem_warn, mem_critical),
        "storage": (store_warn, store_critical),
        "streams": (streams_warn, streams_critical),
        "consumers": (consumers_warn, consumers_critical),
    }

    async def go() -> Check:
        result = Check("JetStream")
        try:
            async with connected(conn) as nc:
                api = Api(nc, conn)
                account_usage(result, await api.request("INFO"), thresholds)
                if replicas:
                    infos, missing = await js.stream_list(api)
                    bad = [i for i in infos if replica_health(i, seen_s, replica_lag_critical)]
                    result.metric("replicas_ok", len(infos) - len(bad))
                    result.metric("replicas_fail", len(bad) + len(missing))
                    if bad or missing:
                        result.criticals.append(f"{len(bad) + len(missing)} unhealthy streams")
        except CliError as exc:
            result.criticals.append(f"JetStream not available: {exc.message}")
        if not result.criticals and not result.warnings:
            result.oks.append(f"{len(result.perf)} checks passed")
        return result

    return finish(run(go()), output_format)


@check.command("stream", help="Check one stream: its cluster peers, lag and message counts")
@click.option("--stream", "stream_name", required=True, help="The stream to check")
@click.option(
    "--peer-expect", type=int, default=None, help="Number of peers (leader included) expected"
)
@click.option(
    "--peer-lag-critical", type=int, default=None, help="Peer lag in operations that is critical"
)
@click.option(
    "--peer-seen-critical", default=None, help="A peer not seen for this long is critical"
)
@click.option("--msgs-warn", type=int, default=None, help="Warn with fewer messages than this")
@click.option(
    "--msgs-critical", type=int, default=None, help="Critical with fewer messages than this"
)
@FORMAT_OPT
@connection
def check_stream_cmd(
    conn: ConnOptions,
    stream_name: str,
    peer_expect: int | None,
    peer_lag_critical: int | None,
    peer_seen_critical: str | None,
    msgs_warn: int | None,
    msgs_critical: int | None,
    output_format: str,
) -> int:
    seen_s = _seconds(peer_seen_critical, "--peer-seen-critical") if peer_seen_critical else 0.0

    async def go() -> Check:
        result = Check(f"Stream {stream_name}")
        try:
            async with connected(conn) as nc:
                info = await js.stream_info(Api(nc, conn), stream_name)
        except CliError as exc:
            result.criticals.append(exc.message)
            return result
        _stream_peers(result, info, peer_expect, peer_lag_critical or 0, seen_s)
        msgs = int((info.get("state") or {}).get("messages") or 0)
        result.metric("messages", msgs, "", float(msgs_warn or 0), float(msgs_critical or 0))
        if msgs_critical is not None and msgs < msgs_critical:
            result.criticals.append(f"{msgs} messages")
        elif msgs_warn is not None and msgs < msgs_warn:
            result.warnings.append(f"{msgs} messages")
        if not result.criticals and not result.warnings:
            result.oks.append(f"{msgs} messages")
        return result

    return finish(run(go()), output_format)


def _stream_peers(
    result: Check, info: dict[str, Any], expect: int | None, lag_crit: int, seen_s: float
) -> None:
    cluster = info.get("cluster") or {}
    peers = cluster.get("replicas") or []
    total = len(peers) + (1 if cluster.get("leader") else 0)
    result.metric("peers", total, "", 0, float(expect or 0))
    if expect is not None and total != expect:
        result.criticals.append(f"{total} peers of {expect}")
    if expect is not None and expect > 1 and not cluster.get("leader"):
        result.criticals.append("no leader")
    for p in peers:
        name = p.get("name")
        if p.get("offline"):
            result.criticals.append(f"{name} offline")
        elif not p.get("current"):
            result.criticals.append(f"{name} not current")
        if lag_crit and int(p.get("lag") or 0) > lag_crit:
            result.criticals.append(f"{name} {p.get('lag')} operations behind")
        if seen_s and int(p.get("active") or 0) > seen_s * NS_PER_S:
            result.criticals.append(
                f"{name} not seen for {int(p.get('active') or 0) / NS_PER_S:.1f}s"
            )
