"""JetStream API calls the commands share: paging lists, loading infos, picking names."""

from __future__ import annotations

from typing import Any

from jetraft.cli import prompts
from jetraft.cli.conn import Api
from jetraft.cli.errors import ApiError, CliError
from jetraft.cli.render import stdin_is_tty


async def stream_names(api: Api, subject: str = "") -> list[str]:
    names: list[str] = []
    while True:
        body: dict[str, Any] = {"offset": len(names)}
        if subject:
            body["subject"] = subject
        reply = await api.request("STREAM.NAMES", body)
        page = reply.get("streams") or []
        names += page
        if not page or len(names) >= int(reply.get("total") or 0):
            return sorted(names)


async def stream_list(api: Api, subject: str = "") -> tuple[list[dict[str, Any]], list[str]]:
    """Every stream's info, and the names the server listed as missing (offline)."""
    infos: list[dict[str, Any]] = []
    missing: list[str] = []
    while True:
        body: dict[str, Any] = {"offset": len(infos)}
        if subject:
            body["subject"] = subject
        reply = await api.request("STREAM.LIST", body)
        page = reply.get("streams") or []
        infos += page
        missing += reply.get("missing") or []
        if not page or len(infos) >= int(reply.get("total") or 0):
            return infos, missing


async def stream_info(api: Api, name: str) -> dict[str, Any]:
    try:
        return await api.request(f"STREAM.INFO.{name}")
    except ApiError as exc:
        raise exc.with_context(f"could not load stream {name}") from None


async def consumer_names(api: Api, stream: str) -> list[str]:
    names: list[str] = []
    while True:
        reply = await api.request(f"CONSUMER.NAMES.{stream}", {"offset": len(names)})
        page = reply.get("consumers") or []
        names += page
        if not page or len(names) >= int(reply.get("total") or 0):
            return sorted(names)


async def consumer_list(api: Api, stream: str) -> list[dict[str, Any]]:
    infos: list[dict[str, Any]] = []
    while True:
        reply = await api.request(f"CONSUMER.LIST.{stream}", {"offset": len(infos)})
        page = reply.get("consumers") or []
        infos += page
        if not page or len(infos) >= int(reply.get("total") or 0):
            return infos


async def consumer_info(api: Api, stream: str, consumer: str) -> dict[str, Any]:
    try:
        return await api.request(f"CONSUMER.INFO.{stream}.{consumer}")
    except ApiError as exc:
        raise exc.with_context(f"could not load consumer {stream} > {consumer}") from None


async def pick_stream(api: Api, name: str | None, show_all: bool = False) -> str:
    """``name``, or on a terminal a choice among the streams; else a usage error."""
    if name:
        return name
    if not stdin_is_tty():
        raise CliError("a stream name is required", 2)
    names = [n for n in await stream_names(api) if show_all or not _internal(n)]
    if not names:
        raise CliError("no streams are defined")
    return prompts.select("Select a Stream", names)


async def pick_consumer(api: Api, stream: str, name: str | None) -> str:
    if name:
        return name
    if not stdin_is_tty():
        raise CliError("a consumer name is required", 2)
    names = await consumer_names(api, stream)
    if not names:
        raise CliError(f"stream {stream} has no consumers")
    return prompts.select("Select a Consumer", names)


def _internal(name: str) -> bool:
    """KV buckets and object stores are streams too; lists hide them unless asked."""
    return name.startswith(("KV_", "OBJ_"))


def is_internal(name: str) -> bool:
    return _internal(name)
