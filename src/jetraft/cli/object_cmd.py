"""``jetraft object`` (``obj``): add, put, get, ls, rm, info on object store buckets, through
nats-py's object store (stream ``OBJ_<bucket>``, chunks on ``$O.<bucket>.C.>``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import nats.js.errors

from jetraft.cli import prompts
from jetraft.cli.conn import Api, Client, connected, run
from jetraft.cli.errors import CliError
from jetraft.cli.group import group
from jetraft.cli.options import ConnOptions, connection
from jetraft.cli.render import Columns, Table, print_json, stdin_is_tty, strip_api_type
from jetraft.cli.stream_view import add_cluster_section
from jetraft.cli.units import (
    NS_PER_S,
    ibytes,
    local_stamp,
    parse_duration_ns,
    parse_size,
    parse_time,
)

obj = group("object", "Object store buckets")


async def _store(nc: Client, conn: ConnOptions, bucket: str) -> Any:
    try:
        return await nc.jetstream(prefix=conn.js_api_prefix, timeout=conn.timeout_s).object_store(
            bucket
        )
    except (nats.js.errors.BucketNotFoundError, nats.js.errors.NotFoundError):
        raise CliError(f"bucket {bucket} not found") from None


def _nats_error(what: str, exc: Exception) -> CliError:
    desc = getattr(exc, "description", None) or str(exc) or type(exc).__name__
    code = getattr(exc, "err_code", None)
    return CliError(f"{what}: {desc}" + (f" ({code})" if code else ""))


@obj.command("add", help="Create an object store bucket")
@click.argument("bucket")
@click.option("--description", default="", help="A description of the bucket")
@click.option("--replicas", default=1, type=click.IntRange(1, 5), help="Replicas of the data")
@click.option(
    "--storage", type=click.Choice(["file", "memory"]), default="file", help="Storage backend"
)
@click.option("--ttl", default=None, help="How long objects are kept")
@click.option("--max-bucket-size", default=None, help="Largest bucket (e.g. 1GB)")
@click.option("--json", "-j", "as_json", is_flag=True, help="Produce JSON output")
@connection
def add_cmd(
    conn: ConnOptions,
    bucket: str,
    description: str,
    replicas: int,
    storage: str,
    ttl: str | None,
    max_bucket_size: str | None,
    as_json: bool,
) -> None:
    from nats.js.api import ObjectStoreConfig, StorageType

    try:
        ttl_s = parse_duration_ns(ttl) / NS_PER_S if ttl else None
        max_bytes = parse_size(max_bucket_size) if max_bucket_size else -1
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    config = ObjectStoreConfig(
        bucket=bucket,
        description=description or None,
        ttl=ttl_s,
        replicas=replicas,
        max_bytes=max_bytes,
        storage=StorageType.MEMORY if storage == "memory" else StorageType.FILE,
    )

    async def go() -> None:
        async with connected(conn) as nc:
            try:
                js = nc.jetstream(prefix=conn.js_api_prefix, timeout=conn.timeout_s)
                await js.create_object_store(bucket, config=config)
            except nats.js.errors.APIError as exc:
                raise _nats_error(f"could not create bucket {bucket}", exc) from None
            await _show_bucket(nc, conn, bucket, as_json)

    run(go())


async def _show_bucket(nc: Client, conn: ConnOptions, bucket: str, as_json: bool) -> None:
    try:
        info = await Api(nc, conn).request(f"STREAM.INFO.OBJ_{bucket}")
    except CliError:
        raise CliError(f"bucket {bucket} not found") from None
    if as_json:
        print_json(strip_api_type(info))
        return
    cfg, state = info.get("config") or {}, info.get("state") or {}
    cols = Columns(f"Information for Object Store Bucket {bucket}")
    cols.title("Configuration")
    cols.row("Bucket Name", bucket)
    cols.row_if_set("Description", cfg.get("description"))
    cols.row("Replicas", int(cfg.get("num_replicas") or 1))
    cols.row("Storage", str(cfg.get("storage", "file")).title())
    cols.row("Size", ibytes(int(state.get("bytes") or 0)))
    cols.row("JetStream Stream", cfg.get("name", ""))
    add_cluster_section(cols, info.get("cluster"))
    cols.print()


@obj.command("put", help="Store a file (or stdin) as an object")
@click.argument("bucket")
@click.argument("file", required=False)
@click.option("--name", default=None, help="Object name (default: the file name)")
@click.option("--description", default=None, help="A description of the object")
@connection
def put_cmd(
    conn: ConnOptions, bucket: str, file: str | None, name: str | None, description: str | None
) -> None:
    if file:
        try:
            data = Path(file).read_bytes()
        except OSError as exc:
            raise CliError(f"could not read {file}: {exc.strerror or exc}") from None
    elif not stdin_is_tty():
        data = sys.stdin.buffer.read()
    else:
        raise CliError("give a file to store, or pipe data on stdin with --name", 2)
    object_name = name or (Path(file).name if file else "")
    if not object_name:
        raise CliError("--name is required when reading stdin", 2)

    async def go() -> None:
        from nats.js.api import ObjectMeta

        async with connected(conn) as nc:
            store = await _store(nc, conn, bucket)
            try:
                info = await store.put(
                    object_name, data, ObjectMeta(name=object_name, description=description)
                )
            except nats.js.errors.Error as exc:
                raise _nats_error(f"could not store {object_name}", exc) from None
        size, chunks = ibytes(info.size or 0), info.chunks or 0
        print(f"Stored {object_name} in bucket {bucket}: {size} in {chunks} chunks")

    run(go())


@obj.command("get", help="Fetch an object into a file")
@click.argument("bucket")
@click.argument("name")
@click.option(
    "--output", "-O", default=None, help="File to write (- for stdout; default: the object name)"
)
@click.option("--force", "-f", is_flag=True, help="Overwrite an existing file")
@connection
def get_cmd(conn: ConnOptions, bucket: str, name: str, output: str | None, force: bool) -> None:
    target = output or Path(name).name
    if target != "-" and Path(target).exists() and not force:
        raise CliError(f"{target} exists, pass --force to overwrite it", 2)

    async def go() -> bytes:
        async with connected(conn) as nc:
            store = await _store(nc, conn, bucket)
            try:
                result = await store.get(name)
            except nats.js.errors.ObjectNotFoundError:
                raise CliError(f"object {name} not found in bucket {bucket}") from None
            except nats.js.errors.Error as exc:
                raise _nats_error(f"could not fetch {name}", exc) from None
            return bytes(result.data or b"")

    data = run(go())
    if target == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    Path(target).write_bytes(data)
    print(f"Wrote: {ibytes(len(data))} to {target}")


@obj.command("ls", help="List the objects of a bucket")
@click.argument("bucket")
@click.option("--json", "-j", "as_json", is_flag=True, help="Produce JSON output")
@connection
def ls_cmd(conn: ConnOptions, bucket: str, as_json: bool) -> None:
    async def go() -> list[Any]:
        async with connected(conn) as nc:
            store = await _store(nc, conn, bucket)
            try:
                return list(await store.list())
            except nats.js.errors.NotFoundError:
                return []

    items = [i for i in run(go()) if not i.deleted]
    rows = [
        {"name": i.name, "size": int(i.size or 0), "chunks": int(i.chunks or 0), "time": i.mtime}
        for i in sorted(items, key=lambda i: str(i.name))
    ]
    if as_json:
        print_json(rows)
        return
    if not rows:
        print("No entries found")
        return
    table = Table(f"Bucket Contents for {bucket}", ["Name", "Size", "Time"])
    for r in rows:
        when = parse_time(r["time"]) if isinstance(r["time"], str) else None
        table.add(r["name"], ibytes(r["size"]), local_stamp(when) if when else "")
    table.print()


@obj.command("rm", help="Remove an object, or the whole bucket when no name is given")
@click.argument("bucket")
@click.argument("name", required=False)
@click.option("--force", "-f", is_flag=True, help="Remove without asking")
@connection
def rm_cmd(conn: ConnOptions, bucket: str, name: str | None, force: bool) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            if name:
                store = await _store(nc, conn, bucket)
                if not force and not prompts.confirm(f"Delete object {bucket} > {name}?"):
                    return
                try:
                    await store.delete(name)
                except nats.js.errors.ObjectNotFoundError:
                    raise CliError(f"object {name} not found in bucket {bucket}") from None
                return
            await _store(nc, conn, bucket)
            if not force and not prompts.confirm(f"Delete bucket {bucket}?"):
                return
            await Api(nc, conn).request(f"STREAM.DELETE.OBJ_{bucket}")

    run(go())


@obj.command("info", help="Show a bucket's configuration")
@click.argument("bucket")
@click.option("--json", "-j", "as_json", is_flag=True, help="Produce JSON output")
@connection
def info_cmd(conn: ConnOptions, bucket: str, as_json: bool) -> None:
    async def go() -> None:
        async with connected(conn) as nc:
            await _show_bucket(nc, conn, bucket, as_json)

    run(go())


obj.alias("add", "new")
obj.alias("ls", "list")
obj.alias("rm", "del", "delete")
obj.alias("info", "status")
