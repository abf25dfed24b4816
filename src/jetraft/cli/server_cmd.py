"""``jetraft server ls|report jetstream|cluster step-down|cluster peer-remove`` (system account).

Every server answers ``$SYS.REQ.SERVER.PING.<KIND>`` for the system account; the CLI gathers
the replies (until none came for 0.3 s, or the timeout) and renders them. The meta leader is
the server whose name equals ``meta_cluster.leader`` in its own JSZ reply.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import click

from jetraft.cli import prompts
from jetraft.cli.conn import Api, Client, connected, gather, run
from jetraft.cli.errors import CliError
from jetraft.cli.group import group
from jetraft.cli.options import ConnOptions, connection
from jetraft.cli.render import Table, log, log_step_down, print_json
from jetraft.cli.units import human_duration_ns, ibytes, parse_time, since_ns

server = group("server", "Server information and cluster administration (system account)")
JSON_OPT = click.option("--json", "-j", "as_json", is_flag=True, help="Produce JSON output")
PING = "$SYS.REQ.SERVER.PING"


async def jsz(nc: Client, timeout_s: float) -> list[dict[str, Any]]:
    return await gather(nc, f"{PING}.JSZ", {"raft": True}, timeout_s)


def meta_leader(replies: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSZ reply of the server that says it leads the meta group."""
    leaders = [
        r
        for r in replies
        if (r.get("data") or {}).get("meta_cluster", {}).get("leader")
        == (r.get("server") or {}).get("name")
    ]
    if not leaders:
        raise CliError(
            "did not receive a response from the meta leader, ensure the account used has "
            "system privileges and appropriate permissions"
        )
    if len(leaders) > 1:
        raise CliError(f"found {len(leaders)} JetStream meta leaders, cannot tell which to use")
    return leaders[0]


@server.command("ls", help="List the servers of the cluster (the meta leader marked *)")
@click.argument("expect", type=int, default=0, required=False)
@click.option(
    "--sort",
    "sort_by",
    type=click.Choice(["name", "cluster", "conns", "subs", "uptime"]),
    default="name",
    help="Sort servers by",
)
@JSON_OPT
@connection
def ls_cmd(conn: ConnOptions, expect: int, sort_by: str, as_json: bool) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            replies = await gather(nc, f"{PING}.STATSZ", {}, conn.timeout_s, expect)
            leader = _leader_from_statsz(replies)
            if leader is None:
                try:
                    leader = meta_leader(await jsz(nc, conn.timeout_s))["server"]["name"]
                except CliError:
                    leader = ""
        if as_json:
            print_json(replies)
            return
        _servers_table(replies, leader, sort_by).print()

    run(go())


def _leader_from_statsz(replies: list[dict[str, Any]]) -> str | None:
    for r in replies:
        meta = ((r.get("statsz") or {}).get("jetstream") or {}).get("meta") or {}
        if meta.get("leader"):
            return str(meta["leader"])
    return None


def _servers_table(replies: list[dict[str, Any]], leader: str, sort_by: str) -> Table:
    keys = {
        "name": lambda r: r["server"].get("name", ""),
        "cluster": lambda r: (r["server"].get("cluster", ""), r["server"].get("name", "")),
        "conns": lambda r: -int(r["statsz"].get("connections") or 0),
        "subs": lambda r: -int(r["statsz"].get("subscriptions") or 0),
        "uptime": lambda r: r["statsz"].get("start", ""),
    }
    rows = sorted((r for r in replies if "server" in r and "statsz" in r), key=keys[sort_by])
    table = Table(
        "Server Overview",
        ["Name", "Cluster", "Host", "Version", "JS", "Conns", "Subs", "Routes", "Mem", "Uptime"],
    )
    conns = subs = js = 0
    clusters = set()
    for r in rows:
        srv, st = r["server"], r["statsz"]
        name = srv.get("name", "") + ("*" if srv.get("name") == leader and leader else "")
        started, now = parse_time(st.get("start")), parse_time(srv.get("time"))
        uptime = human_duration_ns(since_ns(started, now)) if started and now else ""
        routes = {rt.get("name") or rt.get("rid") for rt in st.get("routes") or []}
        conns += int(st.get("connections") or 0)
        subs += int(st.get("subscriptions") or 0)
        js += 1 if srv.get("jetstream") else 0
        if srv.get("cluster"):
            clusters.add(srv["cluster"])
        table.add(
            name,
            srv.get("cluster", ""),
            srv.get("host", ""),
            srv.get("ver", ""),
            "yes" if srv.get("jetstream") else "no",
            int(st.get("connections") or 0),
            int(st.get("subscriptions") or 0),
            len(routes),
            ibytes(int(st.get("mem") or 0)),
            uptime,
        )
    table.set_footer(
        f"{len(rows)} servers", f"{len(clusters)} clusters", "", "", js, conns, subs, "", "", ""
    )
    return table


report = group("report", "Reports on servers", parent=server)


@report.command(
    "jetstream", help="JetStream per server: streams, consumers, messages, leaders, RAFT meta"
)
@click.option(
    "--sort",
    "sort_by",
    type=click.Choice(["name", "streams", "consumers", "msgs", "bytes"]),
    default="name",
    help="Sort servers by",
)
@JSON_OPT
@connection
def report_js_cmd(conn: ConnOptions, sort_by: str, as_json: bool) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            replies = await jsz(nc, conn.timeout_s)
        if as_json:
            print_json(replies)
            return
        _js_summary(replies, sort_by).print()
        print()
        _meta_report(replies)

    run(go())


def _js_summary(replies: list[dict[str, Any]], sort_by: str) -> Table:
    def d(r: dict[str, Any]) -> dict[str, Any]:
        return r.get("data") or {}

    keys = {
        "name": lambda r: r["server"].get("name", ""),
        "streams": lambda r: -int(d(r).get("streams") or 0),
        "consumers": lambda r: -int(d(r).get("consumers") or 0),
        "msgs": lambda r: -int(d(r).get("messages") or 0),
        "bytes": lambda r: -int(d(r).get("bytes") or 0),
    }
    rows = sorted((r for r in replies if "server" in r), key=keys[sort_by])
    table = Table(
        "JetStream Summary",
        [
            "Server",
            "Cluster",
            "Streams",
            "Consumers",
            "Messages",
            "Bytes",
            "Memory",
            "File",
            "API Req",
            "Stream Leaders",
            "Consumer Leaders",
            "Pending",
        ],
    )
    totals = [0] * 9
    for r in rows:
        data, srv = d(r), r["server"]
        meta = data.get("meta_cluster") or {}
        star = "*" if meta.get("leader") and meta.get("leader") == srv.get("name") else ""
        figures = [
            int(data.get(k) or 0)
            for k in ("streams", "consumers", "messages", "bytes", "memory", "storage")
        ]
        figures += [
            int((data.get("api") or {}).get("total") or 0),
            int(data.get("streams_leader") or 0),
            int(data.get("consumers_leader") or 0),
        ]
        totals = [a + b for a, b in zip(totals, figures, strict=True)]
        table.add(
            srv.get("name", "") + star,
            srv.get("cluster", ""),
            *figures[:3],
            ibytes(figures[3]),
            ibytes(figures[4]),
            ibytes(figures[5]),
            *figures[6:],
            int(meta.get("pending") or 0),
        )
    table.set_footer(
        "",
        "",
        *totals[:3],
        ibytes(totals[3]),
        ibytes(totals[4]),
        ibytes(totals[5]),
        *totals[6:],
        "",
    )
    return table


def _meta_report(replies: list[dict[str, Any]]) -> None:
    metas = [(r.get("data") or {}).get("meta_cluster") for r in replies]
    sizes = [int(m.get("cluster_size") or 0) for m in metas if m]
    try:
        lead = meta_leader(replies)
    except CliError:
        if sizes:
            size = max(sizes)
            print(
                f"WARNING: No cluster meta leader found. The cluster expects {size} nodes but "
                f"only {len(replies)} responded. JetStream operation requires at least "
                f"{size // 2 + 1} up nodes."
            )
        return
    meta = lead["data"]["meta_cluster"]
    table = Table(
        f"RAFT Meta Group Information - Lead cluster: {meta.get('name', '')}",
        ["Name", "ID", "Leader", "Current", "Online", "Active", "Lag"],
    )
    peers = [
        {
            "name": meta.get("leader"),
            "peer": meta.get("peer", ""),
            "current": True,
            "active": 0,
            "lag": 0,
        }
    ]
    peers += list(meta.get("replicas") or [])
    for p in sorted(peers, key=lambda p: str(p.get("name"))):
        is_leader = p.get("name") == meta.get("leader")
        table.add(
            p.get("name", ""),
            p.get("peer", ""),
            "yes" if is_leader else "",
            bool(p.get("current")),
            not p.get("offline"),
            human_duration_ns(int(p.get("active") or 0)),
            int(p.get("lag") or 0),
        )
    table.print()


_KINDS = {
    "variables": "VARZ",
    "varz": "VARZ",
    "connections": "CONNZ",
    "connz": "CONNZ",
    "routes": "ROUTEZ",
    "routez": "ROUTEZ",
    "subscriptions": "SUBSZ",
    "subsz": "SUBSZ",
    "jetstream": "JSZ",
    "jsz": "JSZ",
    "accounts": "ACCOUNTZ",
    "accountz": "ACCOUNTZ",
    "health": "HEALTHZ",
    "healthz": "HEALTHZ",
    "raft": "RAFTZ",
    "raftz": "RAFTZ",
    "statsz": "STATSZ",
    "gateways": "GATEWAYZ",
    "leafnodes": "LEAFZ",
}


@server.command("request", help="Ask every server for a monitoring document and print the JSON")
@click.argument("kind", type=click.Choice(sorted(_KINDS)))
@click.option("--name", "server_name", default="", help="Only the server with this name")
@connection
def request_cmd(conn: ConnOptions, kind: str, server_name: str) -> None:
    body = {"server_name": server_name} if server_name else {}

    async def go() -> None:
        async with connected(conn) as nc:
            replies = await gather(nc, f"{PING}.{_KINDS[kind]}", body, conn.timeout_s)
        print_json(sorted(replies, key=lambda r: str((r.get("server") or {}).get("name"))))

    run(go())


@server.command("ping", help="Ping every server and show how long each took to answer")
@connection
def ping_cmd(conn: ConnOptions) -> None:
    async def go() -> list[tuple[str, float]]:
        async with connected(conn) as nc:
            start = time.monotonic()
            seen: list[tuple[str, float]] = []
            inbox = nc.new_inbox()

            async def on_msg(msg: Any) -> None:
                import json

                try:
                    name = str(json.loads(msg.data)["server"]["name"])
                except (ValueError, KeyError, TypeError):
                    return
                seen.append((name, time.monotonic() - start))

            sub = await nc.subscribe(inbox, cb=on_msg)
            await nc.publish(f"{PING}.STATSZ", b"{}", reply=inbox)
            await asyncio.sleep(min(conn.timeout_s, 1.0))
            await sub.unsubscribe()
            return seen

    seen = run(go())
    if not seen:
        raise CliError("no results received, ensure the account used has system privileges")
    for name, rtt in sorted(seen, key=lambda s: s[1]):
        print(f"{name:<30} rtt={rtt * 1000:.2f}ms")
    print(f"\n---- ping statistics ----\n{len(seen)} replies")


server.alias("request", "req")
cluster = group("cluster", "Manage the JetStream meta group", "raft", "r", parent=server)


@cluster.command("step-down", help="Force a new meta leader election")
@click.option(
    "--preferred", "--host", "preferred", default="", help="Prefer this server as new leader"
)
@click.option("--force", "-f", is_flag=True, help="Step down even when no leader is known")
@connection
def meta_step_down_cmd(conn: ConnOptions, preferred: str, force: bool) -> int:
    async def go() -> int:
        async with connected(conn) as nc:
            lead = meta_leader(await jsz(nc, conn.timeout_s))
            meta = lead["data"]["meta_cluster"]
            leader = meta.get("leader") or ""
            if not leader and not force:
                raise CliError("the cluster has no current meta leader")
            peers = len(meta.get("replicas") or []) + 1
            log_step_down(leader, peers)
            body: dict[str, Any] = {"placement": {"preferred": preferred}} if preferred else {}
            reply = await Api(nc, conn).request("META.LEADER.STEPDOWN", body)
            if not reply.get("success"):
                raise CliError("the meta leader did not accept the step down")
            start = time.monotonic()
            while time.monotonic() - start < 10:
                await asyncio.sleep(0.5)
                try:
                    new = meta_leader(await jsz(nc, conn.timeout_s))["server"]["name"]
                except CliError:
                    log("No leader elected")
                    continue
                if new != leader:
                    log(f'New leader elected "{new}"')
                    return 0
            log(f"Leader did not change after {time.monotonic() - start:.1f}s")
            return 1

    return run(go())


@cluster.command("peer-remove", help="Remove a server from the JetStream meta group for good")
@click.argument("name")
@click.option("--force", "-f", is_flag=True, help="Remove without asking")
@connection
def meta_peer_remove_cmd(conn: ConnOptions, name: str, force: bool) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            meta = meta_leader(await jsz(nc, conn.timeout_s))["data"]["meta_cluster"]
            found = [
                r for r in meta.get("replicas") or [] if name in (r.get("name"), r.get("peer"))
            ]
            if not found:
                raise CliError(f"did not find a replica named {name}")
            peer = found[0]
            state = "offline" if peer.get("offline") else "online"
            if not force:
                print(
                    "Removing a peer is meant for servers that will not come back; a removed "
                    "server rejoins only after the whole cluster restarts.\n"
                )
                if not prompts.confirm(f"Really remove {state} peer {peer.get('name')}"):
                    print("Removal canceled")
                    return
            body = {"peer": peer.get("name", ""), "peer_id": peer.get("peer", "")}
            reply = await Api(nc, conn).request("SERVER.REMOVE", body)
            if not reply.get("success"):
                raise CliError(f"the removal of {peer.get('name')} was not accepted")
            log(f'Requested removal of peer "{peer.get("name")}"')

    run(go())


cluster.alias("step-down", "stepdown", "sd", "elect", "down", "d")
cluster.alias("peer-remove", "rm", "pr")
server.alias("ls", "list")
report.alias("jetstream", "js")
