"""``jetraft kv``: add, put, get, del, history, ls, watch, info on Key-Value buckets.

A bucket ``B`` is the stream ``KV_B``, keys are subjects ``$KV.B.<key>`` (nats-py's and the
nats CLI's convention). Buckets are created and keys listed and watched through nats-py's KV
layer; single reads go through ``STREAM.MSG.GET`` so the entry's time is shown.
"""

from __future__ import annotations

import base64
import sys
import time
from datetime import UTC, datetime
from typing import Any

import click
import nats.errors
import nats.js.errors

from jetraft.cli import js, prompts
from jetraft.cli.conn import Api, Client, connected, run
from jetraft.cli.errors import NO_MESSAGE_FOUND, STREAM_NOT_FOUND, ApiError, CliError
from jetraft.cli.group import group
from jetraft.cli.options import ConnOptions, connection
from jetraft.cli.render import Columns, Table, print_json, stdin_is_tty, strip_api_type
from jetraft.cli.stream_view import add_cluster_section
from jetraft.cli.units import (
    NS_PER_S,
    go_duration_ns,
    human_duration_ns,
    ibytes,
    local_rfc3339,
    local_stamp,
    parse_duration_ns,
    parse_size,
    parse_time,
    since_ns,
)

kv = group("kv", "Key-Value buckets")


def _js(nc: Client, conn: ConnOptions) -> Any:
    return nc.jetstream(prefix=conn.js_api_prefix, timeout=conn.timeout_s)


async def _bucket_info(api: Api, bucket: str) -> dict[str, Any]:
    try:
        return await api.request(f"STREAM.INFO.KV_{bucket}")
    except ApiError as exc:
        if exc.err_code == STREAM_NOT_FOUND:
            raise CliError(f"bucket {bucket} not found") from None
        raise


def bucket_page(bucket: str, info: dict[str, Any]) -> Columns:
    cfg, state = info.get("config") or {}, info.get("state") or {}
    created = parse_time(info.get("created"))
    cols = Columns(
        f"Information for Key-Value Store Bucket {bucket} created "
        f"{local_rfc3339(created) if created else '(unknown)'}"
    )
    cols.title("Configuration")
    cols.row("Bucket Name", bucket)
    cols.row_if_set("Description", cfg.get("description"))
    cols.row("History Kept", int(cfg.get("max_msgs_per_subject") or 1))
    cols.row("Values Stored", int(state.get("messages") or 0))
    cols.row("Replicas", int(cfg.get("num_replicas") or 1))
    cols.row("Backing Store Kind", "JetStream")
    cols.row("Bucket Size", ibytes(int(state.get("bytes") or 0)))
    max_bytes = int(cfg.get("max_bytes") or -1)
    cols.row("Maximum Bucket Size", ibytes(max_bytes) if max_bytes > 0 else "unlimited")
    max_value = int(cfg.get("max_msg_size") or -1)
    cols.row("Maximum Value Size", ibytes(max_value) if max_value > 0 else "unlimited")
    max_age = int(cfg.get("max_age") or 0)
    cols.row("Maximum Age", go_duration_ns(max_age) if max_age else "unlimited")
    cols.row("JetStream Stream", cfg.get("name", f"KV_{bucket}"))
    cols.row("Storage", str(cfg.get("storage", "file")).title())
    add_cluster_section(cols, info.get("cluster"))
    return cols


@kv.command("add", help="Create a Key-Value bucket")
@click.argument("bucket")
@click.option("--history", default=1, type=click.IntRange(1, 64), help="Values kept per key")
@click.option("--ttl", default=None, help="How long values are kept (e.g. 1h)")
@click.option("--replicas", default=1, type=click.IntRange(1, 5), help="Replicas of the data")
@click.option(
    "--storage", type=click.Choice(["file", "memory"]), default="file", help="Storage backend"
)
@click.option("--max-value-size", default=None, help="Largest value (e.g. 1KB)")
@click.option("--max-bucket-size", default=None, help="Largest bucket (e.g. 1GB)")
@click.option("--description", default="", help="A description of the bucket")
@click.option("--json", "-j", "as_json", is_flag=True, help="Produce JSON output")
@connection
def add_cmd(
    conn: ConnOptions,
    bucket: str,
    history: int,
    ttl: str | None,
    replicas: int,
    storage: str,
    max_value_size: str | None,
    max_bucket_size: str | None,
    description: str,
    as_json: bool,
) -> None:
    from nats.js.api import KeyValueConfig, StorageType

    try:
        ttl_s = parse_duration_ns(ttl) / NS_PER_S if ttl else None
        value_max = parse_size(max_value_size) if max_value_size else -1
        bucket_max = parse_size(max_bucket_size) if max_bucket_size else -1
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    config = KeyValueConfig(
        bucket=bucket,
        description=description or None,
        history=history,
        ttl=ttl_s,
        replicas=replicas,
        max_value_size=value_max,
        max_bytes=bucket_max,
        storage=StorageType.MEMORY if storage == "memory" else StorageType.FILE,
    )

    async def go() -> None:
        async with connected(conn) as nc:
            try:
                await _js(nc, conn).create_key_value(config=config)
            except nats.js.errors.APIError as exc:
                raise CliError(
                    f"could not create bucket {bucket}: {exc.description} ({exc.err_code})"
                ) from None
            info = await _bucket_info(Api(nc, conn), bucket)
        if as_json:
            print_json(strip_api_type(info))
        else:
            bucket_page(bucket, info).print()

    run(go())


@kv.command("info", help="Show a bucket's configuration and state")
@click.argument("bucket")
@click.option("--json", "-j", "as_json", is_flag=True, help="Produce JSON output")
@connection
def info_cmd(conn: ConnOptions, bucket: str, as_json: bool) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            info = await _bucket_info(Api(nc, conn), bucket)
        if as_json:
            print_json(strip_api_type(info))
        else:
            bucket_page(bucket, info).print()

    run(go())


async def _publish(
    nc: Client, conn: ConnOptions, subject: str, value: bytes, headers: dict[str, str] | None = None
) -> int:
    try:
        msg = await nc.request(subject, value, timeout=conn.timeout_s, headers=headers)
    except nats.errors.NoRespondersError:
        raise CliError("the bucket does not exist (no stream holds its subjects)") from None
    import json

    ack = json.loads(msg.data or b"{}")
    if isinstance(ack.get("error"), dict):
        raise ApiError.from_reply(ack["error"])
    return int(ack.get("seq") or 0)


@kv.command("put", help="Store a value (read from stdin when not given)")
@click.argument("bucket")
@click.argument("key")
@click.argument("value", required=False)
@connection
def put_cmd(conn: ConnOptions, bucket: str, key: str, value: str | None) -> None:
    data = value if value is not None else ("" if stdin_is_tty() else sys.stdin.read())

    async def go() -> None:
        async with connected(conn) as nc:
            await _bucket_info(Api(nc, conn), bucket)
            await _publish(nc, conn, f"$KV.{bucket}.{key}", data.encode())
        print(data)

    run(go())


async def _entry(api: Api, bucket: str, key: str, revision: int | None) -> dict[str, Any]:
    body: dict[str, Any] = (
        {"seq": revision} if revision else {"last_by_subj": f"$KV.{bucket}.{key}"}
    )
    try:
        msg = (await api.request(f"STREAM.MSG.GET.KV_{bucket}", body))["message"]
    except ApiError as exc:
        if exc.err_code == NO_MESSAGE_FOUND:
            raise CliError(f"key {key!r} not found in bucket {bucket}") from None
        if exc.err_code == STREAM_NOT_FOUND:
            raise CliError(f"bucket {bucket} not found") from None
        raise
    if msg.get("subject") != f"$KV.{bucket}.{key}":
        raise CliError(f"revision {revision} of bucket {bucket} is not key {key!r}")
    headers = base64.b64decode(msg.get("hdrs") or "").decode(errors="replace")
    op = (
        "DEL"
        if "KV-Operation: DEL" in headers
        else "PURGE"
        if "KV-Operation: PURGE" in headers
        else "PUT"
    )
    return {
        "bucket": bucket,
        "key": key,
        "revision": msg.get("seq"),
        "created": msg.get("time"),
        "operation": op,
        "value": base64.b64decode(msg.get("data") or "").decode(errors="replace"),
    }


@kv.command("get", help="Show a key's value")
@click.argument("bucket")
@click.argument("key")
@click.option("--revision", type=int, default=None, help="A specific revision")
@click.option("--raw", is_flag=True, help="Print only the value")
@click.option("--json", "-j", "as_json", is_flag=True, help="Produce JSON output")
@connection
def get_cmd(
    conn: ConnOptions, bucket: str, key: str, revision: int | None, raw: bool, as_json: bool
) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            entry = await _entry(Api(nc, conn), bucket, key, revision)
        if entry["operation"] != "PUT" and not revision:
            raise CliError(f"key {key!r} not found in bucket {bucket} (deleted)")
        if as_json:
            print_json(entry)
        elif raw:
            print(entry["value"])
        else:
            created = parse_time(entry["created"])
            stamp = local_stamp(created) if created else "?"
            print(f"{bucket} > {key} revision: {entry['revision']} created @ {stamp}\n")
            print(entry["value"])
            print()

    run(go())


@kv.command("del", help="Delete a key, or the whole bucket when no key is given")
@click.argument("bucket")
@click.argument("key", required=False)
@click.option("--force", "-f", is_flag=True, help="Delete without asking")
@connection
def del_cmd(conn: ConnOptions, bucket: str, key: str | None, force: bool) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            await _bucket_info(api, bucket)
            if key:
                if not force and not prompts.confirm(f"Delete key {bucket} > {key}?"):
                    return
                await _publish(nc, conn, f"$KV.{bucket}.{key}", b"", {"KV-Operation": "DEL"})
            else:
                if not force and not prompts.confirm(f"Delete bucket {bucket}?"):
                    return
                await api.request(f"STREAM.DELETE.KV_{bucket}")

    run(go())


@kv.command("history", help="Every kept revision of a key")
@click.argument("bucket")
@click.argument("key")
@click.option("--json", "-j", "as_json", is_flag=True, help="Produce JSON output")
@connection
def history_cmd(conn: ConnOptions, bucket: str, key: str, as_json: bool) -> None:
    async def go() -> list[dict[str, Any]]:
        async with connected(conn) as nc:
            api = Api(nc, conn)
            await _bucket_info(api, bucket)
            entries: list[dict[str, Any]] = []
            seq = 1
            while True:
                try:
                    reply = await api.request(
                        f"STREAM.MSG.GET.KV_{bucket}",
                        {"seq": seq, "next_by_subj": f"$KV.{bucket}.{key}"},
                    )
                except ApiError as exc:
                    if exc.err_code == NO_MESSAGE_FOUND:
                        return entries
                    raise
                found = int(reply["message"]["seq"])
                entries.append(await _entry(api, bucket, key, found))
                seq = found + 1

    entries = run(go())
    if not entries:
        raise CliError(f"key {key!r} not found in bucket {bucket}")
    if as_json:
        print_json(entries)
        return
    table = Table(
        f"History for {bucket} > {key}", ["Key", "Revision", "Op", "Created", "Length", "Value"]
    )
    for e in entries:
        created = parse_time(e["created"])
        table.add(
            key,
            e["revision"],
            e["operation"],
            local_stamp(created) if created else "",
            len(e["value"]),
            e["value"][:40],
        )
    table.print()


@kv.command("ls", help="List buckets, or the keys of one bucket")
@click.argument("bucket", required=False)
@click.option("--names", "-n", "names_only", is_flag=True, help="Only the bucket names")
@click.option("--json", "-j", "as_json", is_flag=True, help="Produce JSON output")
@connection
def ls_cmd(conn: ConnOptions, bucket: str | None, names_only: bool, as_json: bool) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            if bucket:
                try:
                    keys = await (await _js(nc, conn).key_value(bucket)).keys()
                except nats.js.errors.NoKeysError:
                    keys = []
                except nats.js.errors.BucketNotFoundError:
                    raise CliError(f"bucket {bucket} not found") from None
                if as_json:
                    print_json(sorted(keys))
                elif keys:
                    print("\n".join(sorted(keys)))
                else:
                    print("No keys found in bucket")
                return
            infos, _ = await js.stream_list(Api(nc, conn))
        buckets = [i for i in infos if i["config"]["name"].startswith("KV_")]
        names = sorted(i["config"]["name"][3:] for i in buckets)
        if as_json or names_only:
            if as_json:
                print_json(names)
            else:
                print("\n".join(names))
            return
        if not buckets:
            print("No Key-Value buckets found")
            return
        table = Table(
            "Key-Value Buckets",
            ["Bucket", "Description", "Created", "Size", "Values", "Last Update"],
        )
        now = datetime.now(UTC)
        for i in sorted(buckets, key=lambda b: str(b["config"]["name"])):
            created, last = parse_time(i.get("created")), parse_time(i["state"].get("last_ts"))
            age = (
                human_duration_ns(since_ns(last, now))
                if last and i["state"].get("messages")
                else "never"
            )
            table.add(
                i["config"]["name"][3:],
                i["config"].get("description", ""),
                local_stamp(created) if created else "",
                ibytes(int(i["state"].get("bytes") or 0)),
                int(i["state"].get("messages") or 0),
                age,
            )
        table.print()

    run(go())


@kv.command("watch", help="Print changes to a bucket (all keys or one) as they happen")
@click.argument("bucket")
@click.argument("key", default=">", required=False)
@click.option("--history", "include_history", is_flag=True, help="Include historic values")
@click.option("--count", default=0, type=click.IntRange(min=0), help="Quit after this many changes")
@connection
def watch_cmd(conn: ConnOptions, bucket: str, key: str, include_history: bool, count: int) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            try:
                store = await _js(nc, conn).key_value(bucket)
            except nats.js.errors.BucketNotFoundError:
                raise CliError(f"bucket {bucket} not found") from None
            watcher = await store.watch(key, include_history=include_history)
            seen = 0
            print(f"Watching {bucket} > {key}", file=sys.stderr, flush=True)
            while not count or seen < count:
                try:
                    entry = await watcher.updates(timeout=3600)
                except (TimeoutError, nats.errors.TimeoutError):
                    continue
                if entry is None:
                    continue  # the marker after the initial values
                seen += 1
                stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                op = entry.operation or "PUT"
                if op in ("DEL", "PURGE"):
                    print(f"[{stamp}] {op} {bucket} > {entry.key}", flush=True)
                else:
                    value = (entry.value or b"").decode(errors="replace")
                    print(f"[{stamp}] PUT {bucket} > {entry.key}: {value}", flush=True)
            await watcher.stop()

    run(go())


kv.alias("add", "new")
kv.alias("del", "rm")
kv.alias("ls", "list")
kv.alias("info", "status")
