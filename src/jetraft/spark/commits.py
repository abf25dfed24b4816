"""The sink's commit log: a KV bucket holding, per query (or write id), the last batch id
whose publishing was committed by Spark. Keys are ``q.<query id>`` and ``w.<write id>``."""

from __future__ import annotations

import nats.js.errors
from nats.js.api import KeyValueConfig
from nats.js.kv import KeyValue

from jetraft.spark import loop
from jetraft.spark.options import WriteOptions


async def _bucket(opts: WriteOptions, create: bool) -> KeyValue:
    assert opts.commit_bucket is not None
    nc = await loop.connection(opts.conn)
    js = nc.jetstream(timeout=opts.conn.request_timeout_s)
    try:
        return await js.key_value(opts.commit_bucket)
    except nats.js.errors.BucketNotFoundError:
        if not create:
            raise
    try:
        return await js.create_key_value(KeyValueConfig(bucket=opts.commit_bucket, history=1))
    except nats.js.errors.Error as exc:
        raise RuntimeError(
            f"cannot create the sink's commit bucket {opts.commit_bucket!r}: {exc}; "
            "create it beforehand, or set commitBucket to '' to rely on the stream's "
            "duplicate window only"
        ) from exc


async def ensure_bucket(opts: WriteOptions) -> None:
    await _bucket(opts, create=True)


async def committed(opts: WriteOptions, kind: str, owner: str) -> int | None:
    """The last committed batch id recorded for ``owner``, or None."""
    kv = await _bucket(opts, create=True)
    try:
        entry = await kv.get(f"{kind}.{owner}")
    except nats.js.errors.KeyNotFoundError:
        return None
    if entry.value is None:
        return None
    return int(entry.value.decode())


async def record(opts: WriteOptions, kind: str, owner: str, batch_id: int) -> None:
    kv = await _bucket(opts, create=True)
    await kv.put(f"{kind}.{owner}", str(batch_id).encode())
