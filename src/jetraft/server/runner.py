"""Run a server in the foreground until SIGINT/SIGTERM: the `jetraft server` command."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import time
from pathlib import Path

from jetraft.config import ConfigError, ServerConfig, build_config, load_config, parse_args
from jetraft.server import signal_cmd
from jetraft.server.core import proto_trace
from jetraft.server.core.imports import check_imports
from jetraft.server.core.mappings import check_mappings
from jetraft.server.core.startup import StartError
from jetraft.server.reload import reload
from jetraft.server.server import Server

log = logging.getLogger("jetraft")


def _setup_logging(cfg: ServerConfig) -> None:
    """Where and how the log is written: ``log_file`` (appended to) or standard error,
    ``logtime``/``logtime_utc``, and the level of ``debug``/``trace``. A log file that
    cannot be opened stops the start (OSError, reported by ``main``)."""
    # -V (trace) shows the protocol trace log and everything -D (debug) shows.
    level = proto_trace.TRACE if cfg.trace else logging.DEBUG if cfg.debug else logging.INFO
    when = "%(asctime)s " if cfg.logtime else ""
    formatter = logging.Formatter(f"[%(process)d] {when}[%(levelname).3s] %(message)s")
    if cfg.logtime_utc:
        formatter.converter = time.gmtime
    handler: logging.Handler = (
        logging.FileHandler(cfg.log_file) if cfg.log_file else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(formatter)
    logging.basicConfig(level=level, handlers=[handler], force=True)  # again on a reload


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


async def serve(cfg: ServerConfig, argv: list[str] | None = None) -> int:
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

    def reload_config() -> None:
        if argv is None:
            log.error("Failed to reload server configuration: no configuration to read again")
            return

        def load() -> ServerConfig:
            new = build_config(argv)
            check_mappings(new)
            check_imports(new)
            return new

        reload(server, load, _setup_logging)

    loop.add_signal_handler(signal.SIGHUP, reload_config)

    def reopen_log() -> None:
        """SIGUSR1, after a log rotation: the log file is opened (created) again."""
        try:
            _setup_logging(server.config)
        except OSError as exc:
            print(f"jetraft: could not reopen the log file: {exc}", file=sys.stderr)
            return
        if server.config.log_file:
            log.info("File log re-opened")

    loop.add_signal_handler(signal.SIGUSR1, reopen_log)
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


def _send_signal(command: str) -> int:
    try:
        signal_cmd.send(command)
    except signal_cmd.SignalError as exc:
        print(f"jetraft: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    try:
        path, flags = parse_args(argv)
        if flags.signal:
            return _send_signal(flags.signal)
        if flags.check_config:
            return check_config(path)
        cfg = build_config(argv)
        check_mappings(cfg)
        check_imports(cfg)
    except ConfigError as exc:
        print(f"jetraft: configuration error: {exc}", file=sys.stderr)
        return 1
    try:
        _setup_logging(cfg)
        if cfg.pid_file:
            Path(cfg.pid_file).write_text(f"{os.getpid()}")
    except OSError as exc:
        print(f"jetraft: {exc}", file=sys.stderr)
        return 1
    for warning in cfg.warnings:
        log.warning("config: %s", warning)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(cfg, argv))
    return int(uvloop.run(serve(cfg, argv)))
