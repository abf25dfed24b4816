"""Feed the example pipeline: JSON orders published to the ORDERS stream.

    python examples/spark/publish_orders.py [--servers URLS] [--count 5000] [--rate 200]
        [--start TIME --step SECONDS]

Creates the ORDERS stream (subjects ``orders.>``) when it is missing, then publishes
``--count`` orders at about ``--rate`` per second (0: as fast as the stream acknowledges),
each acknowledged by the stream. An order, on subject ``orders.<region>``:

    {"order_id": "o-17", "customer": "c-3", "region": "eu", "amount": 12.5,
     "time": "2025-06-01T12:00:05.250Z"}

``time`` is the order's event time: the moment it is published (a live feed) or, with
``--start``, ``--start`` plus ``--step`` seconds per order (a backfill: for example
``--start 2025-06-01T12:00:00Z --step 1 --count 600 --rate 0`` publishes ten minutes of
orders at once).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

REGIONS = ("eu", "us", "apac")


def time_text(moment: datetime) -> str:
    """ISO 8601 in UTC with milliseconds: 2025-06-01T12:00:05.250Z."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def order(
    order_id: str, region: str, amount: float, moment: datetime, customer: str = "c-0"
) -> dict[str, Any]:
    """One order as published (``amount`` in currency units, two decimals)."""
    return {
        "order_id": order_id,
        "customer": customer,
        "region": region,
        "amount": amount,
        "time": time_text(moment),
    }


def random_orders(
    count: int, first_id: int = 0, seed: int = 1, start: datetime | None = None, step_s: float = 1
) -> Iterator[dict[str, Any]]:
    """``count`` random orders; timed ``start + i * step_s``, or now (when each is taken)."""
    rng = random.Random(seed)
    for i in range(count):
        moment = datetime.now(UTC) if start is None else start + timedelta(seconds=i * step_s)
        yield order(
            order_id=f"o-{first_id + i}",
            region=rng.choice(REGIONS),
            amount=round(rng.uniform(1, 200), 2),
            moment=moment,
            customer=f"c-{rng.randrange(100)}",
        )


async def publish_orders(
    servers: str, orders: Iterable[dict[str, Any]], rate: float = 0.0, replicas: int = 1
) -> int:
    """Create ORDERS if missing and publish ``orders`` to ``orders.<region>``, each one
    acknowledged by the stream before the next; about ``rate`` per second (0: no pacing).
    Returns how many were published."""
    nc = await nats.connect(servers.split(","))
    try:
        js = nc.jetstream(timeout=10)
        try:
            await js.stream_info("ORDERS")
        except NotFoundError:
            await js.add_stream(
                StreamConfig(
                    name="ORDERS", subjects=["orders.>"], allow_direct=True, num_replicas=replicas
                )
            )
        interval_s = 1.0 / rate if rate > 0 else 0.0
        started = time.monotonic()
        published = 0
        for item in orders:
            await js.publish(f"orders.{item['region']}", json.dumps(item).encode())
            published += 1
            if interval_s:
                # Pace against the start time, so slow acks do not lower the rate.
                delay = started + published * interval_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
        return published
    finally:
        await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="nats://127.0.0.1:4222")
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=200.0, help="orders per second, 0 = max")
    parser.add_argument("--replicas", type=int, default=1, help="for ORDERS if created")
    parser.add_argument("--first-id", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--start",
        type=datetime.fromisoformat,
        default=None,
        help="event time of the first order, ISO 8601 (default: each order's publish time)",
    )
    parser.add_argument("--step", type=float, default=1.0, help="seconds between event times")
    args = parser.parse_args()
    if args.start is not None and args.start.tzinfo is None:
        args.start = args.start.replace(tzinfo=UTC)

    orders = random_orders(args.count, args.first_id, args.seed, args.start, args.step)
    started = time.monotonic()
    count = asyncio.run(publish_orders(args.servers, orders, args.rate, args.replicas))
    print(f"published {count} orders in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
