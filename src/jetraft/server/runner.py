"""Run a server in the foreground until SIGINT/SIGTERM: the `jetraft server` command."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
from pathlib import Path

from jetraft.config import ConfigError, ServerConfig, build_config, load_config, parse_args
from jetraft.server.core.imports import check_imports
from jetraft.server.core.mappings import check_mappings
from jetraft.server.core.startup import StartError
from jetraft.server.server import Server

log = logging.getLogger("jetraft")


def _setup_logging(cfg: ServerConfig) -> None:
    level = logging.DEBUG if (cfg.debug or cfg.trace) else logging.INFO
    logging.basicConfig(
        level=level,
        format="[%(process)d] %(asctime)s [%(levelname).3s] %(message)s",
        stream=sys.stderr,
    )


# Collection thresholds once the server runs. The defaults (700, 10, 10) collect the
# youngest generation every 700 net allocations: a JetStream server allocates several
# objects per message (entries, futures, stored records), so it collected thousands of
# times per second and promoted short-lived objects that later, costlier collections
# scanned again (R3 publish: about a quarter of the stream leader's CPU per message,
# measured with and without). Nearly everything here is freed by reference counting; the
# collector only reclaims cycles, and at these thresholds it still does so within about
# 100k allocations.
GC_THRESHOLDS = (100_000, 50, 100)


def tune_gc() -> None:
    """After start-up: what exists now (modules, classes, configuration, recovered
    state) lives as long as the process, so the collector stops scanning it (freeze),
    and it runs less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def serve(cfg: ServerConfig) -> int:
    server = Server(cfg)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    # Handlers go in before the listeners open: a signal sent as soon as the port answers
    # must still shut down cleanly.
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    def lame_duck() -> None:
        log.info("Entering lame duck mode, stop accepting new clients")
        task = asyncio.ensure_future(server.lame_duck())
        task.add_done_callback(lambda _: stop.set())

    loop.add_signal_handler(signal.SIGUSR2, lame_duck)
    try:
        await server.start()
    except StartError as exc:
        print(f"jetraft: {exc}", file=sys.stderr)
        await server.stop()  # whatever had started (routes, JetStream) stops cleanly
        return 1
    tune_gc()
    await stop.wait()
    log.info("Initiating Shutdown...")
    await server.stop()
    log.info("Server Exiting..")
    return 0


def check_config(path: Path | None) -> int:
    """``-t``: read the configuration as a start would, report, exit. Like nats-server's
    check, warnings (unknown or ignored fields) fail it too."""
    if path is None:
        print("jetraft: must specify [-c, --config] option to check configuration file syntax",
              file=sys.stderr)
        return 1
    cfg = load_config(path)
    check_mappings(cfg)
    check_imports(cfg)
    for warning in cfg.warnings:
        print(f"jetraft: {warning}", file=sys.stderr)
    if cfg.warnings:
        return 1
    print(f"jetraft: configuration file {path} is valid", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    try:
        path, flags = parse_args(argv)
        if flags.check_config:
            return check_config(path)
        cfg = build_config(argv)
        check_mappings(cfg)
        check_imports(cfg)
    except ConfigError as exc:
        print(f"jetraft: configuration error: {exc}", file=sys.stderr)
        return 1
    _setup_logging(cfg)
    for warning in cfg.warnings:
        log.warning("config: %s", warning)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(cfg))
    return int(uvloop.run(serve(cfg)))
