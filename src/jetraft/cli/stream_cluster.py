"""``jetraft stream cluster step-down|peer-remove``: the seeds' RAFT group administration.

step-down: read the stream info (leader and replicas), ask the leader to step down, then poll
the info every half second until a different leader is reported, and show the info again.
peer-remove: pick a peer among the leader and replicas (asked when ``--peer`` is not given)
and ask the meta leader to remove it; the server places a replacement to keep the replicas.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import click

from jetraft.cli import js, prompts
from jetraft.cli.conn import Api, connected, run
from jetraft.cli.errors import CliError
from jetraft.cli.group import group
from jetraft.cli.options import ConnOptions, connection
from jetraft.cli.render import log, log_step_down
from jetraft.cli.stream_cmd import JSON_OPT, show_info, stream

cluster = group("cluster", "Manage a clustered stream", "c", parent=stream)

STEP_DOWN_WAIT_S = 10.0
POLL_EVERY_S = 0.5


async def wait_new_leader(
    load: Any, old: str, what: str, deadline_s: float = STEP_DOWN_WAIT_S
) -> dict[str, Any] | None:
    """Polls ``load()`` until its cluster leader differs from ``old``; None if it never did."""
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        await asyncio.sleep(POLL_EVERY_S)
        try:
            info: dict[str, Any] = await load()
        except CliError as exc:
            log(f"Failed to retrieve {what} state: {exc.message}")
            continue
        leader = (info.get("cluster") or {}).get("leader") or ""
        if not leader:
            log("No leader elected")
            continue
        if leader != old:
            log(f'New leader elected "{leader}"')
            return info
    log(f"Leader did not change after {time.monotonic() - start:.1f}s")
    return None


@cluster.command("step-down", help="Force a new leader election by asking the leader to step down")
@click.argument("name", required=False)
@click.option("--preferred", default="", help="Prefer this server as the new leader")
@click.option("--force", "-f", is_flag=True, help="Step down even when no leader is known")
@JSON_OPT
@connection
def step_down_cmd(
    conn: ConnOptions, name: str | None, preferred: str, force: bool, as_json: bool
) -> int:
    async def go() -> int:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            picked = await js.pick_stream(api, name)
            info = await js.stream_info(api, picked)
            group_info = info.get("cluster") or {}
            if not group_info.get("replicas"):
                raise CliError(f'stream "{picked}" is not clustered')
            leader = group_info.get("leader") or ""
            if not leader and not force:
                raise CliError(f'stream "{picked}" has no current leader')
            peers = len(group_info["replicas"]) + 1
            log_step_down(leader, peers)
            body: dict[str, Any] = {"placement": {"preferred": preferred}} if preferred else {}
            reply = await api.request(f"STREAM.LEADER.STEPDOWN.{picked}", body)
            if not reply.get("success"):
                raise CliError(f"step down of stream {picked} was not accepted")
            new = await wait_new_leader(lambda: js.stream_info(api, picked), leader, "Stream")
            print()
            show_info(new or await js.stream_info(api, picked), as_json)
            return 0 if new is not None else 1

    return run(go())


@cluster.command("peer-remove", help="Remove a peer from the stream's RAFT group")
@click.argument("name", required=False)
@click.argument("peer_arg", metavar="[PEER]", required=False)
@click.option("--peer", default="", help="The server to remove (asked when not given)")
@click.option("--force", "-f", is_flag=True, help="Allow removing the only peer of a stream")
@connection
def peer_remove_cmd(
    conn: ConnOptions, name: str | None, peer_arg: str | None, peer: str, force: bool
) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            picked = await js.pick_stream(api, name)
            info = await js.stream_info(api, picked)
            group_info = info.get("cluster") or {}
            if not group_info.get("name"):
                raise CliError(f'stream "{picked}" is not clustered')
            peers = [p for p in [group_info.get("leader") or ""] if p]
            peers += [r.get("name", "") for r in group_info.get("replicas") or []]
            if len(peers) == 1 and not force:
                raise CliError(
                    "removing the only peer of a stream loses its data, use --force to do it anyway"
                )
            chosen = peer or peer_arg or prompts.select("Select a Peer", peers, avoid="--peer NAME")
            log(f'Removing peer "{chosen}"')
            reply = await api.request(f"STREAM.PEER.REMOVE.{picked}", {"peer": chosen})
            if not reply.get("success"):
                raise CliError(f"removal of peer {chosen} was not accepted")
            log(f'Requested removal of peer "{chosen}"')

    run(go())


cluster.alias("step-down", "stepdown", "sd", "elect", "down", "d")
cluster.alias("peer-remove", "pr")
