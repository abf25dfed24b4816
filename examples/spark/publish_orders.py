"""Feed the example pipeline: JSON orders published to the ORDERS stream.

    python examples/spark/publish_orders.py [--servers URLS] [--count 5000] [--rate 200]

Creates the ORDERS stream (subjects ``orders.>``) when it is missing, then publishes
``--count`` orders at about ``--rate`` per second, each acknowledged by the stream. An order:
``{"order_id": "o-17", "customer": "c-3", "region": "eu", "amount": 12.5}`` on subject
``orders.<region>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

import nats
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

REGIONS = ("eu", "us", "apac")


async def ensure_stream(
    js: nats.js.JetStreamContext, name: str, subject: str, replicas: int
) -> None:
    try:
        await js.stream_info(name)
    except NotFoundError:
        await js.add_stream(
            StreamConfig(name=name, subjects=[subject], allow_direct=True, num_replicas=replicas)
        )


async def main(args: argparse.Namespace) -> None:
    nc = await nats.connect(args.servers.split(","))
    js = nc.jetstream(timeout=10)
    await ensure_stream(js, "ORDERS", "orders.>", args.replicas)
    rng = random.Random(args.seed)
    interval_s = 1.0 / args.rate if args.rate > 0 else 0.0
    started = time.monotonic()
    for i in range(args.count):
        region = rng.choice(REGIONS)
        order = {
            "order_id": f"o-{args.first_id + i}",
            "customer": f"c-{rng.randrange(100)}",
            "region": region,
            "amount": round(rng.uniform(1, 200), 2),
        }
        await js.publish(f"orders.{region}", json.dumps(order).encode())
        if interval_s:
            # Pace against the start time, so slow acks do not lower the rate.
            delay = started + (i + 1) * interval_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
    print(f"published {args.count} orders in {time.monotonic() - started:.1f} s")
    await nc.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="nats://127.0.0.1:4222")
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=200.0, help="orders per second, 0 = max")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--first-id", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    asyncio.run(main(parser.parse_args()))
