"""State machines by name, and the per-seed choice of a mixed campaign."""

from __future__ import annotations

from jetraft.raft.sim.node import Payload, SmFactory
from jetraft.raft.sim.world import STATE_MACHINES, SeedResult, SimConfig, run_seed

from .stream_sm import durable_stream_sm, stream_payload, stream_sm

MACHINES: dict[str, tuple[SmFactory, Payload]] = {
    **STATE_MACHINES,
    "stream": (stream_sm, stream_payload),
    "stream-file": (durable_stream_sm, stream_payload),
}
MIXED = ("hash", "durable", "stream", "stream-file")


def machine_of(seed: int, sm: str) -> str:
    """`mixed` gives each seed one of the machines in turn."""
    return MIXED[seed % len(MIXED)] if sm == "mixed" else sm


def config_for(nodes: int, sm: str) -> SimConfig:
    factory, payload = MACHINES[sm]
    stream = sm.startswith("stream")
    chunk = 512 if stream else 6  # several chunks per snapshot either way
    scale = 4 if stream else 1  # a stream entry is a message: larger than an id
    return SimConfig(nodes=nodes, sm=factory, sm_name=sm, payload=payload,
                     max_snapshot_chunk_bytes=chunk, entry_scale=scale)


def run_seed_any(args: tuple[int, int, str]) -> SeedResult:
    """run_seed for (seed, nodes, machine), picklable for a process pool."""
    seed, nodes, sm = args
    res = run_seed(seed, config_for(nodes, sm))
    return res
