"""JetStream consumer timers, jetraft beside nats-server: how closely redeliveries and replays
keep the times they are configured for.

    python -m benchmarks.js_timers [--rounds N] [--only jetraft|nats-server]

The pass/fail tests only check the order of events (and that nothing comes early, with a
bounded negative wait); how *accurate* the timers are is measured here. For each scenario the
client measures, with its own monotonic clock, the time between the event that starts a timer
and the delivery it causes:

* nak delay: ``-NAK {"delay": D}`` -> redelivery;
* backoff: delivery n -> delivery n+1 with ``backoff=[...]`` (no ack);
* ack wait: delivery -> redelivery of an unacked message;
* replay original: stored messages D apart -> deliveries of a push consumer with
  ``replay_policy=original``.

Each line shows the configured time and the observed median and maximum over N rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable

import nats
from nats.js.api import AckPolicy, ConsumerConfig, ReplayPolicy

from benchmarks.common import free_port, machine_summary
from benchmarks.js_consume import start_server

Measure = Callable[[nats.NATS, str], Awaitable[list[tuple[float, float]]]]


async def nak_delay(nc: nats.NATS, tag: str) -> list[tuple[float, float]]:
    js = nc.jetstream()
    await js.add_stream(name=f"N{tag}", subjects=[f"n{tag}"])
    await js.publish(f"n{tag}", b"x")
    sub = await js.pull_subscribe(f"n{tag}", durable="D", config=ConsumerConfig(ack_wait=30))
    out = []
    for delay in (0.2, 1.0):
        (m,) = await sub.fetch(1, timeout=5)
        await m.nak(delay=delay)
        t0 = time.monotonic()
        (m,) = await sub.fetch(1, timeout=delay + 5)
        out.append((delay, time.monotonic() - t0))
        await m.nak()
    return out


async def backoff(nc: nats.NATS, tag: str) -> list[tuple[float, float]]:
    js = nc.jetstream()
    await js.add_stream(name=f"B{tag}", subjects=[f"b{tag}"])
    await js.publish(f"b{tag}", b"x")
    steps = [0.2, 0.5, 1.0]
    cfg = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, backoff=steps, max_deliver=4)
    sub = await js.pull_subscribe(f"b{tag}", durable="D", config=cfg)
    stamps = []
    for _ in range(4):
        await sub.fetch(1, timeout=5)
        stamps.append(time.monotonic())
    return [(steps[i], stamps[i + 1] - stamps[i]) for i in range(3)]


async def ack_wait(nc: nats.NATS, tag: str) -> list[tuple[float, float]]:
    js = nc.jetstream()
    await js.add_stream(name=f"W{tag}", subjects=[f"w{tag}"])
    await js.publish(f"w{tag}", b"x")
    cfg = ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=0.5)
    sub = await js.pull_subscribe(f"w{tag}", durable="D", config=cfg)
    await sub.fetch(1, timeout=5)
    t0 = time.monotonic()
    await sub.fetch(1, timeout=5)
    return [(0.5, time.monotonic() - t0)]


async def replay(nc: nats.NATS, tag: str) -> list[tuple[float, float]]:
    js = nc.jetstream()
    await js.add_stream(name=f"R{tag}", subjects=[f"r{tag}"])
    gap = 0.3
    for i in range(3):
        await js.publish(f"r{tag}", b"%d" % i)
        if i < 2:
            await asyncio.sleep(gap)  # the input: stored messages `gap` apart
    stamps: list[float] = []
    got = asyncio.Event()

    async def cb(msg: nats.aio.msg.Msg) -> None:
        stamps.append(time.monotonic())
        if len(stamps) == 3:
            got.set()

    inbox = nc.new_inbox()
    await nc.subscribe(inbox, cb=cb)
    cfg = ConsumerConfig(
        deliver_subject=inbox, replay_policy=ReplayPolicy.ORIGINAL, ack_policy=AckPolicy.NONE
    )
    await js.add_consumer(f"R{tag}", cfg)
    await asyncio.wait_for(got.wait(), 10)
    return [(gap, stamps[i + 1] - stamps[i]) for i in range(2)]


SCENARIOS: dict[str, Measure] = {
    "nak delay": nak_delay,
    "backoff": backoff,
    "ack wait": ack_wait,
    "replay original": replay,
}


async def measure(port: int, rounds: int) -> dict[tuple[str, float], list[float]]:
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    out: dict[tuple[str, float], list[float]] = {}
    try:
        for r in range(rounds):
            for name, scenario in SCENARIOS.items():
                for want, got in await scenario(nc, f"{r}{len(out)}"):
                    out.setdefault((name, want), []).append(got)
    finally:
        await nc.close()
    return out


def run(kind: str, rounds: int) -> dict[tuple[str, float], list[float]]:
    with tempfile.TemporaryDirectory(prefix="jstimers-") as store:
        port = free_port()
        proc = start_server(kind, port, store)
        try:
            return asyncio.run(measure(port, rounds))
        finally:
            proc.terminate()
            proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=["jetraft", "nats-server"])
    args = ap.parse_args()
    kinds = [args.only] if args.only else ["jetraft", "nats-server"]
    results = {kind: run(kind, args.rounds) for kind in kinds}
    print(machine_summary())
    print(f"consumer timers, {args.rounds} rounds; observed median / max in seconds")
    print(f"{'timer':<18}{'configured':>11}" + "".join(f"{k:>24}" for k in kinds))
    for key in results[kinds[0]]:
        cells = []
        for kind in kinds:
            got = results[kind].get(key, [])
            cells.append(f"{statistics.median(got):.3f} / {max(got):.3f}" if got else "-")
        print(f"{key[0]:<18}{key[1]:>11.2f}" + "".join(f"{c:>24}" for c in cells))


if __name__ == "__main__":
    main()
