"""``jetraft stream`` (``str``, ``s``): add, info, ls, edit, rm, purge, get, rmm, report."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import click

from jetraft.cli import js, prompts, stream_config
from jetraft.cli.conn import Api, connected, run
from jetraft.cli.errors import CliError
from jetraft.cli.group import group
from jetraft.cli.options import ConnOptions, connection
from jetraft.cli.render import print_json, stdin_is_tty, strip_api_type
from jetraft.cli.stream_view import report_row, report_table, stream_info_page, streams_table
from jetraft.cli.units import human_duration_ns, local_stamp, parse_time, since_ns

stream = group("stream", "JetStream stream management")
JSON_OPT = click.option("--json", "-j", "as_json", is_flag=True, help="Produce JSON output")
FORCE_OPT = click.option("--force", "-f", is_flag=True, help="Act without asking for confirmation")


def show_info(info: dict[str, Any], as_json: bool, state_only: bool = False) -> None:
    if as_json:
        print_json(strip_api_type(info))
    else:
        stream_info_page(info, state_only).print()


@stream.command("add", help="Create a new stream")
@click.argument("name", required=False)
@stream_config.stream_flags
@click.option("--config", "config_file", help="JSON file with the stream configuration")
@click.option("--defaults", is_flag=True, help="Accept default values for every question")
@JSON_OPT
@connection
def add_cmd(
    conn: ConnOptions,
    name: str | None,
    config_file: str | None,
    defaults: bool,
    as_json: bool,
    **flags: Any,
) -> None:
    given = stream_config.given(flags)
    if config_file:
        cfg = stream_config.load_file(config_file)
        name = name or cfg.get("name")
    else:
        if not name:
            name = prompts.text("Stream Name", required=True) if stdin_is_tty() else None
        if not name:
            raise CliError("a stream name is required", 2)
        if not defaults and stdin_is_tty():
            given = stream_config.ask_missing(name, given)
        cfg = stream_config.new_config(name)
    cfg = stream_config.apply(cfg, given)
    cfg["name"] = name
    run(_add(conn, str(name), cfg, as_json))


async def _add(conn: ConnOptions, name: str, cfg: dict[str, Any], as_json: bool) -> None:
    async with connected(conn) as nc:
        api = Api(nc, conn)
        try:
            info = await api.request(f"STREAM.CREATE.{name}", cfg)
        except CliError as exc:
            raise CliError(
                f"could not create stream {name}: {exc.message}", exc.exit_code
            ) from None
        show_info(info, as_json)


@stream.command("info", help="Stream information")
@click.argument("name", required=False)
@JSON_OPT
@click.option("--state", "state_only", is_flag=True, help="Show only the stream state")
@click.option("--all", "-a", "show_all", is_flag=True, help="Include KV and object store streams")
@connection
def info_cmd(
    conn: ConnOptions, name: str | None, as_json: bool, state_only: bool, show_all: bool
) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            picked = await js.pick_stream(api, name, show_all)
            show_info(await js.stream_info(api, picked), as_json, state_only)

    run(go())


@stream.command("ls", help="List streams")
@click.option("--subject", default="", help="Only streams holding this subject")
@click.option("--names", "-n", "names_only", is_flag=True, help="Only the stream names")
@click.option("--all", "-a", "show_all", is_flag=True, help="Include KV and object store streams")
@JSON_OPT
@connection
def ls_cmd(
    conn: ConnOptions, subject: str, names_only: bool, show_all: bool, as_json: bool
) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            if names_only or as_json:
                names = [
                    n
                    for n in await js.stream_names(api, subject)
                    if show_all or not js.is_internal(n)
                ]
                if as_json:
                    print_json(names)
                else:
                    for n in names:
                        print(n)
                return
            infos, missing = await js.stream_list(api, subject)
            shown = [i for i in infos if show_all or not js.is_internal(i["config"]["name"])]
            if not shown and not missing:
                hidden = len(infos) > len(shown)
                print(
                    "No Streams defined" + (", pass -a to include system streams" if hidden else "")
                )
                return
            title = f"Streams matching {subject}" if subject else "Streams"
            streams_table(shown, title).print()
            if missing:
                print(f"\nInaccessible Streams: {', '.join(sorted(missing))}")

    run(go())


stream.alias("add", "create", "new")
stream.alias("info", "nfo", "i")
stream.alias("ls", "list", "l")


@stream.command("edit", help="Change an existing stream's configuration")
@click.argument("name", required=False)
@stream_config.stream_flags
@click.option("--config", "config_file", help="JSON file with the new configuration")
@FORCE_OPT
@click.option("--dry-run", is_flag=True, help="Only show the differences")
@JSON_OPT
@connection
def edit_cmd(
    conn: ConnOptions,
    name: str | None,
    config_file: str | None,
    force: bool,
    dry_run: bool,
    as_json: bool,
    **flags: Any,
) -> None:
    given = stream_config.given(flags)

    async def go() -> None:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            picked = await js.pick_stream(api, name)
            current = (await js.stream_info(api, picked))["config"]
            base = stream_config.load_file(config_file) if config_file else current
            new = stream_config.apply(base, given)
            new["name"] = picked
            changes = _diff(current, new)
            if not changes:
                print(f"No difference in configuration of stream {picked}")
                return
            print(f"Differences (-old +new) for stream {picked}:")
            for line in changes:
                print(line)
            print()
            if dry_run:
                return
            if not force and not prompts.confirm(f"Really edit Stream {picked}"):
                return
            try:
                info = await api.request(f"STREAM.UPDATE.{picked}", new)
            except CliError as exc:
                raise CliError(
                    f"could not edit stream {picked}: {exc.message}", exc.exit_code
                ) from None
            show_info(info, as_json)

    run(go())


def _diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    lines = []
    for key in sorted(set(old) | set(new)):
        if key in new and old.get(key) != new.get(key):
            lines.append(f"  - {key}: {json.dumps(old.get(key))}")
            lines.append(f"  + {key}: {json.dumps(new.get(key))}")
    return lines


@stream.command("rm", help="Remove a stream and all its messages")
@click.argument("name", required=False)
@FORCE_OPT
@connection
def rm_cmd(conn: ConnOptions, name: str | None, force: bool) -> None:
    if force and not name:
        raise CliError("--force requires a stream name", 2)

    async def go() -> None:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            picked = await js.pick_stream(api, name)
            if not force and not prompts.confirm(f"Really delete Stream {picked}"):
                return
            try:
                await api.request(f"STREAM.DELETE.{picked}")
            except CliError as exc:
                raise CliError(
                    f"could not remove stream {picked}: {exc.message}", exc.exit_code
                ) from None

    run(go())


@stream.command("purge", help="Remove messages from a stream")
@click.argument("name", required=False)
@FORCE_OPT
@click.option("--subject", default="", help="Only messages on this subject")
@click.option("--seq", type=int, default=0, help="Purge up to, not including, this sequence")
@click.option("--keep", type=int, default=0, help="Keep this many of the newest messages")
@JSON_OPT
@connection
def purge_cmd(
    conn: ConnOptions,
    name: str | None,
    force: bool,
    subject: str,
    seq: int,
    keep: int,
    as_json: bool,
) -> None:
    if seq and keep:
        raise CliError("--seq and --keep cannot be combined", 2)

    async def go() -> None:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            picked = await js.pick_stream(api, name)
            if not force and not prompts.confirm(f"Really purge Stream {picked}"):
                return
            body: dict[str, Any] = {}
            if subject:
                body["filter"] = subject
            if seq:
                body["seq"] = seq
            if keep:
                body["keep"] = keep
            reply = await api.request(f"STREAM.PURGE.{picked}", body or None)
            info = await js.stream_info(api, picked)
            if as_json:
                print_json(strip_api_type(info))
                return
            print(f"Purged {reply.get('purged', 0)} messages from {picked}\n")
            show_info(info, False, state_only=True)

    run(go())


stream.alias("rm", "delete", "del")


@stream.command("get", help="Retrieve a message from a stream")
@click.argument("name", required=False)
@click.argument("seq", type=int, required=False)
@click.option("--last-for", "-S", "last_for", default="", help="The last message on this subject")
@JSON_OPT
@connection
def get_cmd(
    conn: ConnOptions, name: str | None, seq: int | None, last_for: str, as_json: bool
) -> None:
    if seq is None and not last_for:
        raise CliError("give a message sequence or --last-for SUBJECT", 2)

    async def go() -> None:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            picked = await js.pick_stream(api, name)
            body = {"last_by_subj": last_for} if last_for else {"seq": seq}
            try:
                reply = await api.request(f"STREAM.MSG.GET.{picked}", body)
            except CliError as exc:
                what = f"the last message on {last_for}" if last_for else f"{picked}#{seq}"
                raise CliError(f"could not retrieve {what}: {exc.message}", exc.exit_code) from None
            _show_message(picked, reply.get("message") or {}, as_json)

    run(go())


def _show_message(stream_name: str, msg: dict[str, Any], as_json: bool) -> None:
    data = base64.b64decode(msg.get("data") or "")
    headers = base64.b64decode(msg.get("hdrs") or "")
    if as_json:
        print_json(msg)
        return
    when = parse_time(msg.get("time"))
    age = human_duration_ns(since_ns(when, datetime.now(UTC))) if when else "?"
    stamp = local_stamp(when) if when else "?"
    subject, seq = msg.get("subject"), msg.get("seq")
    print(f"Item: {stream_name}#{seq} received {stamp} ({age} ago) on Subject {subject}\n")
    lines = [ln for ln in headers.decode(errors="replace").split("\r\n")[1:] if ln]
    if lines:
        print("Headers:")
        for ln in lines:
            key, _, value = ln.partition(":")
            print(f"  {key}: {value.strip()}")
        print()
    print(data.decode(errors="replace"))


@stream.command("rmm", help="Securely remove one message from a stream")
@click.argument("name", required=False)
@click.argument("seq", type=int, required=False)
@FORCE_OPT
@connection
def rmm_cmd(conn: ConnOptions, name: str | None, seq: int | None, force: bool) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            picked = await js.pick_stream(api, name)
            number = seq
            if number is None:
                answer = prompts.text("Message Sequence to remove", required=True)
                number = int(answer) if answer.isdigit() else 0
            if number <= 0:
                raise CliError("a positive message sequence is required", 2)
            if not force and not prompts.confirm(
                f"Really remove message {number} from Stream {picked}"
            ):
                return
            try:
                await api.request(f"STREAM.MSG.DELETE.{picked}", {"seq": number})
            except CliError as exc:
                raise CliError(
                    f"could not remove message {number}: {exc.message}", exc.exit_code
                ) from None

    run(go())


@stream.command(
    "report", help="Statistics of every stream: replicas, leader, messages, bytes, lost"
)
@click.option("--subject", default="", help="Only streams holding this subject")
@click.option("--cluster", "only_cluster", default="", help="Only streams in this cluster")
@click.option("--consumers", "-o", "by_consumers", is_flag=True, help="Sort by number of consumers")
@click.option("--messages", "-m", "by_messages", is_flag=True, help="Sort by number of messages")
@click.option("--name", "-n", "by_name", is_flag=True, help="Sort by stream name")
@click.option("--all", "-a", "show_all", is_flag=True, help="Include KV and object store streams")
@JSON_OPT
@connection
def report_cmd(
    conn: ConnOptions,
    subject: str,
    only_cluster: str,
    by_consumers: bool,
    by_messages: bool,
    by_name: bool,
    show_all: bool,
    as_json: bool,
) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            infos, _ = await js.stream_list(Api(nc, conn), subject)
        rows = [
            report_row(i)
            for i in infos
            if (show_all or not js.is_internal(i["config"]["name"]))
            and (not only_cluster or (i.get("cluster") or {}).get("name") == only_cluster)
        ]
        key = (
            "consumers"
            if by_consumers
            else "messages"
            if by_messages
            else "name"
            if by_name
            else "bytes"
        )
        rows.sort(key=lambda r: r[key])
        if as_json:
            print_json(rows)
        elif not rows:
            print("No Streams defined")
        else:
            print("Obtaining Stream stats\n")
            report_table(rows).print()

    run(go())
