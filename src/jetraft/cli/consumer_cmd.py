"""``jetraft consumer`` (``con``, ``c``): add, info, ls, rm, next, report, cluster step-down."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import click
import nats.errors

from jetraft.cli import js, prompts
from jetraft.cli.conn import Api, Client, connected, run
from jetraft.cli.consumer_view import consumer_info_page, consumers_table, report_row, report_table
from jetraft.cli.errors import CliError
from jetraft.cli.group import group
from jetraft.cli.options import ConnOptions, connection
from jetraft.cli.render import print_json, stdin_is_tty, strip_api_type
from jetraft.cli.stream_cluster import wait_new_leader
from jetraft.cli.units import NS_PER_S, comma, parse_duration_ns

consumer = group("consumer", "JetStream consumer management")
JSON_OPT = click.option("--json", "-j", "as_json", is_flag=True, help="Produce JSON output")


def show(info: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(strip_api_type(info))
    else:
        consumer_info_page(info).print()


def _duration(text: str | None, flag: str) -> int | None:
    if text is None:
        return None
    try:
        return parse_duration_ns(text)
    except ValueError as exc:
        raise CliError(f"{flag}: {exc}", 2) from None


def _deliver(policy: str, cfg: dict[str, Any]) -> None:
    """all | new | next | last | subject | last_per_subject | <sequence> | <duration ago>."""
    simple = {
        "all": "all",
        "new": "new",
        "next": "new",
        "last": "last",
        "subject": "last_per_subject",
        "last_per_subject": "last_per_subject",
    }
    if policy in simple:
        cfg["deliver_policy"] = simple[policy]
    elif policy.isdigit():
        cfg["deliver_policy"], cfg["opt_start_seq"] = "by_start_sequence", int(policy)
    else:
        ago_s = (_duration(policy, "--deliver") or 0) / NS_PER_S
        start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - ago_s))
        cfg["deliver_policy"], cfg["opt_start_time"] = "by_start_time", start


def build_config(name: str | None, o: dict[str, Any]) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "ack_policy": o["ack"] or "explicit",
        "replay_policy": o["replay"] or "instant",
        "deliver_policy": "all",
    }
    if name and not o["ephemeral"]:
        cfg["name"] = cfg["durable_name"] = name
    elif name:
        cfg["name"] = name
    if o["deliver"]:
        _deliver(o["deliver"], cfg)
    filters = [f for item in o["filter"] for f in item.split(",") if f]
    if len(filters) == 1:
        cfg["filter_subject"] = filters[0]
    elif filters:
        cfg["filter_subjects"] = filters
    if o["target"]:
        cfg["deliver_subject"] = o["target"]
        if o["deliver_group"]:
            cfg["deliver_group"] = o["deliver_group"]
        if o["flow_control"]:
            cfg["flow_control"] = True
    simple = {
        "description": "description",
        "max_deliver": "max_deliver",
        "max_pending": "max_ack_pending",
        "max_waiting": "max_waiting",
        "max_pull_batch": "max_batch",
        "max_pull_bytes": "max_bytes",
        "replicas": "num_replicas",
        "bps": "rate_limit_bps",
    }
    for flag, key in simple.items():
        if o[flag] is not None:
            cfg[key] = o[flag]
    for flag, key in (
        ("wait", "ack_wait"),
        ("heartbeat", "idle_heartbeat"),
        ("max_pull_expire", "max_expires"),
        ("inactive_threshold", "inactive_threshold"),
    ):
        value = _duration(o[flag], f"--{flag.replace('_', '-')}")
        if value is not None:
            cfg[key] = value
    if o["sample"] is not None:
        cfg["sample_freq"] = f"{o['sample']}%"
    if o["headers_only"]:
        cfg["headers_only"] = True
    if o["memory"]:
        cfg["mem_storage"] = True
    if o["metadata"]:
        cfg["metadata"] = dict(_kv(m) for m in o["metadata"])
    return cfg


def _kv(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise CliError(f"--metadata: {item!r} is not KEY=VALUE", 2)
    return key, value


def _ask(name: str | None, o: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The nats CLI's questions for a consumer, on a terminal, for what was not given."""
    if not name and not o["ephemeral"]:
        name = prompts.text("Consumer name", required=True)
    if not o["pull"] and not o["target"]:
        o["target"] = prompts.text("Delivery target (empty for Pull Consumers)", "") or None
    if not o["deliver"]:
        o["deliver"] = prompts.text(
            "Start policy (all, new, last, subject, 1h, msg sequence)", "all"
        )
    if not o["ack"]:
        o["ack"] = prompts.select("Acknowledgment policy", ["explicit", "all", "none"])
    if not o["filter"]:
        answer = prompts.text("Filter Stream by subjects (blank for all)", "")
        o["filter"] = (answer,) if answer else ()
    if o["max_deliver"] is None:
        o["max_deliver"] = int(prompts.text("Maximum Allowed Deliveries", "-1") or -1)
    return name, o


@consumer.command("add", help="Create a consumer")
@click.argument("stream", required=False)
@click.argument("name", required=False)
@click.option(
    "--ack",
    type=click.Choice(["none", "all", "explicit"]),
    default=None,
    help="Acknowledgment policy",
)
@click.option("--bps", type=int, default=None, help="Rate limit of deliveries, bits per second")
@click.option(
    "--deliver", default=None, help="Start: all, new, last, subject, a sequence, or a duration ago"
)
@click.option("--deliver-group", default=None, help="Push deliveries only to this queue group")
@click.option("--description", default=None, help="A description of the consumer")
@click.option("--ephemeral", is_flag=True, help="An ephemeral consumer")
@click.option("--filter", multiple=True, help="Only messages on these subjects (repeat)")
@click.option("--flow-control", is_flag=True, help="Push flow control")
@click.option("--heartbeat", default=None, help="Push idle heartbeat interval")
@click.option("--headers-only", is_flag=True, help="Deliver only headers")
@click.option("--max-deliver", type=int, default=None, help="Most deliveries of one message")
@click.option("--max-pending", type=int, default=None, help="Most unacknowledged messages")
@click.option("--max-waiting", type=int, default=None, help="Most waiting pull requests")
@click.option("--max-pull-batch", type=int, default=None, help="Largest pull batch")
@click.option("--max-pull-expire", default=None, help="Longest pull expiry")
@click.option("--max-pull-bytes", type=int, default=None, help="Largest pull max_bytes")
@click.option("--pull", is_flag=True, help="A pull consumer")
@click.option(
    "--replay", type=click.Choice(["instant", "original"]), default=None, help="Replay policy"
)
@click.option(
    "--sample", type=click.IntRange(0, 100), default=None, help="Percent of acks to sample"
)
@click.option("--target", default=None, help="Push delivery subject")
@click.option("--wait", default=None, help="Acknowledgment wait time")
@click.option("--inactive-threshold", default=None, help="Idle time before an ephemeral is removed")
@click.option("--memory", is_flag=True, help="Keep the consumer state in memory")
@click.option("--replicas", type=int, default=None, help="Replicas (default: as the stream)")
@click.option("--metadata", multiple=True, help="Metadata KEY=VALUE (repeat)")
@click.option(
    "--config", "config_file", default=None, help="JSON file with the consumer configuration"
)
@click.option("--defaults", is_flag=True, help="Accept defaults instead of asking")
@JSON_OPT
@connection
def add_cmd(
    conn: ConnOptions,
    stream: str | None,
    name: str | None,
    config_file: str | None,
    defaults: bool,
    as_json: bool,
    **o: Any,
) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            picked = await js.pick_stream(api, stream)
            if config_file:
                cfg = _load(config_file)
                cname = name or cfg.get("name") or cfg.get("durable_name")
            else:
                cname, opts = (name, o) if defaults or not stdin_is_tty() else _ask(name, dict(o))
                cfg = build_config(cname, opts)
            info = await create(api, picked, cname, cfg)
            show(info, as_json)

    run(go())


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path) as fh:
            body = json.load(fh)
    except (OSError, ValueError) as exc:
        raise CliError(f"could not read {path}: {exc}") from None
    if not isinstance(body, dict):
        raise CliError(f"{path} must hold a JSON object")
    inner = body.get("config")
    return dict(inner if isinstance(inner, dict) else body)


async def create(api: Api, stream: str, name: str | None, cfg: dict[str, Any]) -> dict[str, Any]:
    subject = f"CONSUMER.CREATE.{stream}.{name}" if name else f"CONSUMER.CREATE.{stream}"
    try:
        return await api.request(
            subject, {"stream_name": stream, "config": cfg, "action": "create"}
        )
    except CliError as exc:
        raise CliError(f"could not create consumer: {exc.message}", exc.exit_code) from None


@consumer.command("info", help="Consumer information")
@click.argument("stream", required=False)
@click.argument("name", required=False)
@JSON_OPT
@connection
def info_cmd(conn: ConnOptions, stream: str | None, name: str | None, as_json: bool) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            picked = await js.pick_stream(api, stream)
            cname = await js.pick_consumer(api, picked, name)
            show(await js.consumer_info(api, picked, cname), as_json)

    run(go())


@consumer.command("ls", help="List the consumers of a stream")
@click.argument("stream", required=False)
@click.option("--names", "-n", "names_only", is_flag=True, help="Only the consumer names")
@JSON_OPT
@connection
def ls_cmd(conn: ConnOptions, stream: str | None, names_only: bool, as_json: bool) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            picked = await js.pick_stream(api, stream)
            if names_only or as_json:
                names = await js.consumer_names(api, picked)
                if as_json:
                    print_json(names)
                else:
                    for n in names:
                        print(n)
                return
            infos = await js.consumer_list(api, picked)
            if not infos:
                print("No Consumers defined")
                return
            consumers_table(infos).print()

    run(go())


@consumer.command("rm", help="Remove a consumer")
@click.argument("stream", required=False)
@click.argument("name", required=False)
@click.option("--force", "-f", is_flag=True, help="Remove without asking")
@connection
def rm_cmd(conn: ConnOptions, stream: str | None, name: str | None, force: bool) -> None:
    if force and not (stream and name):
        raise CliError("--force requires a stream and consumer name", 2)

    async def go() -> None:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            picked = await js.pick_stream(api, stream)
            cname = await js.pick_consumer(api, picked, name)
            if not force and not prompts.confirm(f"Really delete Consumer {picked} > {cname}"):
                return
            try:
                await api.request(f"CONSUMER.DELETE.{picked}.{cname}")
            except CliError as exc:
                raise CliError(
                    f"could not remove consumer {picked} > {cname}: {exc.message}", exc.exit_code
                ) from None

    run(go())


_ACK_V1 = re.compile(r"^\$JS\.ACK\.[^.]+\.[^.]+\.(\d+)\.(\d+)\.(\d+)\.(\d+)\.(\d+)$")
_ACK_V2 = re.compile(
    r"^\$JS\.ACK\.[^.]+\.[^.]+\.[^.]+\.[^.]+\.(\d+)\.(\d+)\.(\d+)\.(\d+)\.(\d+)(\.[^.]+)?$"
)


def ack_metadata(reply: str) -> tuple[int, int, int, int] | None:
    """(delivered count, stream seq, consumer seq, pending) from a JetStream ack subject."""
    m = _ACK_V1.match(reply) or _ACK_V2.match(reply)
    if m is None:
        return None
    delivered, sseq, cseq, _, pending = (int(g) for g in m.groups()[:5])
    return delivered, sseq, cseq, pending


@consumer.command("next", help="Fetch messages from a pull consumer")
@click.argument("stream")
@click.argument("name")
@click.option("--count", default=1, type=click.IntRange(min=1), help="How many messages to fetch")
@click.option("--ack/--no-ack", default=True, help="Acknowledge each message")
@click.option("--nak", is_flag=True, help="Negatively acknowledge each message")
@click.option("--term", is_flag=True, help="Terminate each message (no redelivery)")
@click.option("--raw", "-r", is_flag=True, help="Print only the message bodies")
@connection
def next_cmd(
    conn: ConnOptions,
    stream: str,
    name: str,
    count: int,
    ack: bool,
    nak: bool,
    term: bool,
    raw: bool,
) -> None:
    if sum((nak, term)) > 1:
        raise CliError("--nak and --term cannot be combined", 2)
    reply = b"-NAK" if nak else b"+TERM" if term else b"+ACK" if ack else None

    async def go() -> None:
        async with connected(conn) as nc:
            for _ in range(count):
                await _next_one(nc, conn, stream, name, reply, raw)

    run(go())


async def _next_one(
    nc: Client, conn: ConnOptions, stream: str, name: str, answer: bytes | None, raw: bool
) -> None:
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        body = {"batch": 1, "expires": int(conn.timeout_s * NS_PER_S * 0.9)}
        await nc.publish(
            f"{conn.js_api_prefix}.CONSUMER.MSG.NEXT.{stream}.{name}",
            json.dumps(body).encode(),
            reply=inbox,
        )
        try:
            msg = await sub.next_msg(timeout=conn.timeout_s)
        except nats.errors.TimeoutError:
            raise CliError("no message received: timed out") from None
    finally:
        await sub.unsubscribe()
    status = (msg.headers or {}).get("Status")
    if status:
        why = (msg.headers or {}).get("Description", "")
        if status == "503":
            raise CliError(f"no responders: does consumer {stream} > {name} exist?")
        raise CliError(f"no message received: {status} {why}".rstrip())
    meta = ack_metadata(msg.reply or "")
    if raw:
        print(msg.data.decode(errors="replace"))
    else:
        if meta:
            delivered, sseq, cseq, pending = meta
            now = time.strftime("%H:%M:%S")
            print(
                f"[{now}] subj: {msg.subject} / tries: {delivered} / cons seq: {cseq} "
                f"/ str seq: {sseq} / pending: {comma(pending)}"
            )
        else:
            print(f"--- subject: {msg.subject}")
        if msg.headers:
            print("\nHeaders:\n")
            for key, value in msg.headers.items():
                print(f"  {key}: {value}")
            print("\nData:\n")
        print()
        print(msg.data.decode(errors="replace"))
    if answer is not None and msg.reply:
        await nc.request(
            msg.reply, answer, timeout=conn.timeout_s
        )  # acks are confirmed (double ack)
        if not raw:
            print(
                {
                    b"+ACK": "\nAcknowledged message",
                    b"-NAK": "\nNAKed message",
                    b"+TERM": "\nTerminated message",
                }[answer]
            )
    if not raw:
        print(flush=True)


@consumer.command("report", help="Statistics of every consumer of a stream")
@click.argument("stream", required=False)
@JSON_OPT
@connection
def report_cmd(conn: ConnOptions, stream: str | None, as_json: bool) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            picked = await js.pick_stream(api, stream)
            msgs = int(
                ((await js.stream_info(api, picked)).get("state") or {}).get("messages") or 0
            )
            rows = [report_row(i, msgs) for i in await js.consumer_list(api, picked)]
        rows.sort(key=lambda r: r["name"])
        if as_json:
            print_json(rows)
        else:
            report_table(picked, rows).print()

    run(go())


cluster = group("cluster", "Manage a clustered consumer", "c", parent=consumer)


@cluster.command("step-down", help="Force a new leader election of a consumer")
@click.argument("stream", required=False)
@click.argument("name", required=False)
@click.option("--force", "-f", is_flag=True, help="Step down even when no leader is known")
@JSON_OPT
@connection
def step_down_cmd(
    conn: ConnOptions, stream: str | None, name: str | None, force: bool, as_json: bool
) -> int:
    from jetraft.cli.render import log_step_down

    async def go() -> int:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            picked = await js.pick_stream(api, stream)
            cname = await js.pick_consumer(api, picked, name)
            info = await js.consumer_info(api, picked, cname)
            cl = info.get("cluster") or {}
            if not cl.get("replicas"):
                raise CliError(f'consumer "{picked}" > "{cname}" is not clustered')
            leader = cl.get("leader") or ""
            if not leader and not force:
                raise CliError("consumer has no current leader")
            log_step_down(leader, len(cl["replicas"]) + 1)
            reply = await api.request(f"CONSUMER.LEADER.STEPDOWN.{picked}.{cname}", {})
            if not reply.get("success"):
                raise CliError("the consumer leader did not accept the step down")
            new = await wait_new_leader(
                lambda: js.consumer_info(api, picked, cname), leader, "Consumer"
            )
            print()
            show(new or await js.consumer_info(api, picked, cname), as_json)
            return 0 if new is not None else 1

    return run(go())


consumer.alias("add", "create", "new")
consumer.alias("info", "nfo")
consumer.alias("ls", "list")
consumer.alias("rm", "delete", "del")
cluster.alias("step-down", "stepdown", "sd", "elect", "down", "d")
