"""Run a server in the foreground until SIGINT/SIGTERM: the `jetraft server` command."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from jetraft.config import ConfigError, ServerConfig, build_config
from jetraft.server.server import Server

log = logging.getLogger("jetraft")


def _setup_logging(cfg: ServerConfig) -> None:
    level = logging.DEBUG if (cfg.debug or cfg.trace) else logging.INFO
    logging.basicConfig(
        level=level,
        format="[%(process)d] %(asctime)s [%(levelname).3s] %(message)s",
        stream=sys.stderr,
    )


async def serve(cfg: ServerConfig) -> None:
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
    await server.start()
    await stop.wait()
    log.info("Initiating Shutdown...")
    await server.stop()
    log.info("Server Exiting..")


def main(argv: list[str]) -> int:
    try:
        cfg = build_config(argv)
    except ConfigError as exc:
        print(f"jetraft: configuration error: {exc}", file=sys.stderr)
        return 1
    _setup_logging(cfg)
    for warning in cfg.warnings:
        log.warning("config: %s", warning)
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(cfg))
    else:
        uvloop.run(serve(cfg))
    return 0
