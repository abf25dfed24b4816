"""The README's Benchmarks tables, in Markdown, from one run of ``readme_figures.sh``:

    python -m benchmarks.readme_tables OUT_DIR

reads the logs that script left in OUT_DIR (core_pubsub, js_publish, js_consume, js_cluster,
spark_bench) and prints each table the README shows, so that the README carries one run's
figures as the benchmarks printed them, with nothing copied by hand. A table whose log is
missing or did not finish is left out, with a line saying so.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

_NUM = r"[\d,.]+"


def _sections(text: str) -> dict[str, list[str]]:
    """The lines of each build's run (``== pure build, ...`` / ``== compiled build, ...``)."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        m = re.match(r"== (pure|compiled) build", line)
        if m:
            current = out.setdefault(m.group(1), [])
        elif current is not None:
            current.append(line)
    return out


def _rows(lines: list[str], columns: int) -> dict[str, list[str]]:
    """Rows of a fixed-width table: a label, then ``columns`` numeric fields (an ``us`` unit
    after a number is dropped)."""
    out: dict[str, list[str]] = {}
    pattern = re.compile(rf"^(\S.*?)\s+((?:{_NUM}(?: us)?\s+){{{columns - 1}}}{_NUM}(?: us)?)\s*$")
    for line in lines:
        m = pattern.match(line)
        if m:
            out[m.group(1).strip()] = m.group(2).replace(" us", "").split()
    return out


def _span(a: str, b: str) -> str:
    """Two runs' figures of the same thing: one value, or low-high."""
    lo, hi = sorted((a, b), key=lambda v: float(v.replace(",", "")))
    return lo if lo == hi else f"{lo}-{hi}"


def _load(lines: list[str]) -> str:
    for line in lines:
        m = re.search(r"load average ([\d.]+) ([\d.]+) ([\d.]+)", line)
        if m:
            return m.group(1)
    return "?"


CORE_LABELS = {
    "1:1 16B": "1:1, 16 B",
    "1:1 1KB": "1:1, 1 KB",
    "fan-out 1:4 16B": "fan-out 1:4, 16 B",
    "fan-out 1:4 1KB": "fan-out 1:4, 1 KB",
    "1:1 mixed 16-79B": "1:1, mixed 16-79 B",
    "routed 1:1 16B": "routed 1:1, 16 B (two servers)",
    "200 conns 128B": "200 connections, 128 B",
}


def _side_by_side(
    text: str, first: str, cpu: str, unit: str, labels: dict[str, str]
) -> Iterator[str]:
    """A table of both builds, each beside its own nats-server run (core, consume): rate,
    nats-server's rate, ratio, jetraft's and nats-server's CPU per message."""
    runs = _sections(text)
    pure, comp = _rows(runs["pure"], 5), _rows(runs["compiled"], 5)
    yield f"| {first} | pure | nats-server | ratio | compiled | nats-server | ratio | {cpu} |"
    yield "|---|---:|---:|---:|---:|---:|---:|---|"
    for key, label in labels.items():
        p, c = pure[key], comp[key]
        per_msg = f"{p[3]} / {c[3]} / {_span(p[4], c[4])}{unit}"
        yield f"| {label} | {p[0]} | {p[1]} | {p[2]} | {c[0]} | {c[1]} | {c[2]} | {per_msg} |"
    for build in ("pure", "compiled"):
        for line in runs[build]:
            if "RSS" in line:
                yield f"<!-- {build}: {line.strip()} -->"


def core(text: str) -> Iterator[str]:
    return _side_by_side(text, "scenario", "CPU/msg pure / compiled / nats", " µs", CORE_LABELS)


PUBLISH_LABELS = {
    "sync 128B": "sync 128 B",
    "sync 1KB": "sync 1 KB",
    "async 128B": "async 128 B",
    "async 1KB": "async 1 KB",
    "async 128B id": "async 128 B, id",
}


def publish(text: str) -> Iterator[str]:
    runs = _sections(text)
    cpu_re = re.compile(r"([\d.]+) / ([\d.]+) / ([\d.]+)\s*$")

    def table(lines: list[str]) -> dict[str, tuple[list[str], list[str]]]:
        out = {}
        for line in lines:
            for key in sorted(PUBLISH_LABELS, key=len, reverse=True):
                if line.startswith(key + " "):
                    cpu = cpu_re.search(line)
                    assert cpu is not None, line
                    figures = line[len(key) : cpu.start()].split()
                    out[key] = (figures, list(cpu.groups()))
                    break
        return out

    pure, comp = table(runs["pure"]), table(runs["compiled"])
    yield (
        "| scenario | pure | compiled | nats default | nats `always` "
        "| pure / compiled vs default | server CPU µs/msg pure / compiled / default |"
    )
    yield "|---|---:|---:|---:|---:|---|---|"
    for key, label in PUBLISH_LABELS.items():
        (p, pc), (c, cc) = pure[key], comp[key]
        cpu = (
            "fsync-bound"
            if key.startswith("sync")
            else f"{pc[0]} / {cc[0]} / {_span(pc[1], cc[1])}"
        )
        yield (
            f"| {label} | {p[0]} | {c[0]} | {_span(p[1], c[1])} | {_span(p[2], c[2])} "
            f"| {p[3]} / {c[3]} | {cpu} |"
        )
    for build in ("pure", "compiled"):
        for line in runs[build]:
            if line.startswith("RSS"):
                yield f"<!-- {build}: {line.strip()} -->"


def consume(text: str) -> Iterator[str]:
    cpu = "server CPU µs/msg pure / compiled / nats"
    return _side_by_side(text, "payload", cpu, "", {"128": "128 B", "1024": "1 KB"})


def cluster(text: str) -> Iterator[str]:
    lines = text.splitlines()
    rates = _rows(lines, 5)
    yield "| msg/s acked | jetraft | nats default | nats `always` | vs default | vs `always` |"
    yield "|---|---:|---:|---:|---:|---:|"
    for key in (
        "R1 sync on leader",
        "R1 async on leader",
        "R1 sync on other server",
        "R1 async on other server",
        "R3 sync on leader",
        "R3 async on leader",
        "R3 sync on follower",
        "R3 async on follower",
    ):
        if key in rates:
            label = key.replace(" on ", ", client on ", 1).replace("on leader", "on the leader")
            yield f"| {label} | " + " | ".join(rates[key]) + " |"
    yield ""
    for line in lines:
        if line.startswith("R3 async on leader ") and "/" in line:
            j, d, a = line[len("R3 async on leader") :].split()
            yield (
                "Server CPU per acknowledged message, R3 async, client on the leader (stream "
                f"leader / the followers): jetraft {j}, nats-server default {d}, `always` {a} µs"
            )
        if line.startswith(("R3 pull consume", "ack gap", "start to JetStream", "idle CPU")):
            yield line


def spark(text: str) -> Iterator[str]:
    lines = text.splitlines()
    yield (
        "| case | jetraft | nats-server | ratio | jetraft server / workers / JVM µs "
        "| nats-server same |"
    )
    yield "|---|---:|---:|---:|---|---|"
    labels = {
        "sink": "sink (batch write, every row acknowledged)",
        "read": "read (batched direct get)",
        "read-consumer": "read (a pull consumer per partition)",
        "stream-read": "streaming read (AvailableNow)",
        "stream-write": "streaming write",
    }
    got: dict[tuple[str, str], list[str]] = {}
    for line in lines:
        m = re.match(rf"^(\S+)\s+(jetraft|nats-server|ratio j/n)\s+((?:{_NUM}\s*)+)", line)
        if m and m.group(1) in labels:
            got[(m.group(1), m.group(2))] = m.group(3).split()
    for case, label in labels.items():
        j, n, r = (got.get((case, who)) for who in ("jetraft", "nats-server", "ratio j/n"))
        if j and n and r:
            yield (
                f"| {label} | {j[0]} | {n[0]} | {r[0]} | {j[1]} / {j[2]} / {j[3]} "
                f"| {n[1]} / {n[2]} / {n[3]} |"
            )
    for line in lines:
        if line.startswith("RSS"):
            yield f"<!-- {line.strip()} -->"


TABLES = {
    "core_pubsub": core,
    "js_publish": publish,
    "js_consume": consume,
    "js_cluster": cluster,
    "spark_bench": spark,
}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    progress = out / "progress.log"
    if progress.exists():
        print("<!-- " + " | ".join(progress.read_text().split("\n")) + " -->")
    for name, make in TABLES.items():
        log = out / f"{name}.log"
        print(f"\n### {name}\n")
        if not log.exists():
            print(f"(no {log})")
            continue
        try:
            for row in make(log.read_text()):
                print(row)
        except (KeyError, AssertionError, IndexError) as exc:
            print(f"({log} is incomplete: {exc!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
