"""Core NATS: ``pub``, ``sub``, ``req`` and ``reply``, with the nats CLI's output."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from typing import Any

import click
import nats.errors

from jetraft.cli import templates
from jetraft.cli.conn import connected, run
from jetraft.cli.errors import CliError
from jetraft.cli.options import ConnOptions, connection
from jetraft.cli.render import log, stdin_is_tty, stdout_is_tty
from jetraft.cli.units import NS_PER_S, parse_duration_ns


def parse_headers(items: tuple[str, ...]) -> dict[str, str] | None:
    headers: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise CliError(f"invalid header {item!r}: use KEY:VALUE", 2)
        headers[key.strip()] = value.strip()
    return headers or None


def _body_or_stdin(body: str | None) -> str:
    if body is not None:
        return body
    if stdin_is_tty():
        return ""
    return sys.stdin.read()


def _seconds(text: str | None, flag: str) -> float:
    if not text:
        return 0.0
    try:
        return parse_duration_ns(text) / NS_PER_S
    except ValueError as exc:
        raise CliError(f"{flag}: {exc}", 2) from None


HEADER_OPT = click.option(
    "--header", "-H", "headers", multiple=True, help="Header as KEY:VALUE (repeat)"
)


@click.command("pub", help="Publish messages; the body and subject may use {{Count}} and friends")
@click.argument("subject")
@click.argument("body", required=False)
@HEADER_OPT
@click.option("--reply", default="", help="Reply subject to set on the messages")
@click.option("--count", default=1, type=click.IntRange(min=1), help="Publish this many messages")
@click.option("--sleep", default=None, help="Pause between messages (e.g. 100ms)")
@click.option("--jetstream", "-J", is_flag=True, help="Publish to JetStream and wait for each ack")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing on success")
@click.option("--templates/--no-templates", default=True, help="Expand {{...}} in subject and body")
@connection
def pub_cmd(
    conn: ConnOptions,
    subject: str,
    body: str | None,
    headers: tuple[str, ...],
    reply: str,
    count: int,
    sleep: str | None,
    jetstream: bool,
    quiet: bool,
    templates: bool,
) -> None:
    text, hdrs, pause = _body_or_stdin(body), parse_headers(headers), _seconds(sleep, "--sleep")
    run(_publish(conn, subject, text, hdrs, reply, count, pause, jetstream, quiet, templates))


async def _publish(
    conn: ConnOptions,
    subject: str,
    body: str,
    hdrs: dict[str, str] | None,
    reply: str,
    count: int,
    pause: float,
    jetstream: bool,
    quiet: bool,
    use_tpl: bool,
) -> None:
    from rich.progress import Progress

    progress = Progress(transient=True) if count > 1 and stdout_is_tty() and not quiet else None
    task = progress.add_task("Publishing", total=count) if progress else None
    async with connected(conn) as nc:
        if progress:
            progress.start()
        try:
            for i in range(1, count + 1):
                subj = templates.render(subject, i) if use_tpl else subject
                data = (templates.render(body, i) if use_tpl else body).encode()
                if jetstream:
                    ack = await _js_publish(nc, subj, data, hdrs, conn.timeout_s)
                    if not quiet and count == 1:
                        print(
                            f">>> Stream: {ack.get('stream')} Sequence: {ack.get('seq')}"
                            + (" (duplicate)" if ack.get("duplicate") else "")
                        )
                else:
                    await nc.publish(subj, data, reply=reply, headers=hdrs)
                if count == 1 and not quiet:
                    log(f'Published {len(data)} bytes to "{subj}"')
                if progress and task is not None:
                    progress.advance(task)
                if pause:
                    await asyncio.sleep(pause)
            await nc.flush(timeout=max(1, int(conn.timeout_s)))
        finally:
            if progress:
                progress.stop()
    if count > 1 and not quiet:
        log(f'Published {count} messages to "{subject}"')


async def _js_publish(
    nc: Any, subject: str, data: bytes, hdrs: dict[str, str] | None, timeout_s: float
) -> dict[str, Any]:
    try:
        msg = await nc.request(subject, data, timeout=timeout_s, headers=hdrs)
    except nats.errors.NoRespondersError:
        raise CliError(f'no stream holds subject "{subject}"') from None
    except nats.errors.TimeoutError:
        raise CliError(f'timed out waiting for the stream to acknowledge "{subject}"') from None
    try:
        ack = json.loads(msg.data)
    except ValueError:
        raise CliError(f'the reply to a publish on "{subject}" is not a JetStream ack') from None
    if isinstance(ack, dict) and isinstance(ack.get("error"), dict):
        err = ack["error"]
        raise CliError(f"{err.get('description')} ({err.get('err_code')})")
    return ack if isinstance(ack, dict) else {}


def print_msg(
    msg: Any,
    number: int,
    *,
    raw: bool,
    show_headers: bool,
    headers_only: bool,
    subjects_only: bool,
    stamp: bool,
) -> None:
    if raw:
        print(msg.data.decode(errors="replace"), flush=True)
        return
    ts = f" @ {time.strftime('%H:%M:%S')}" if stamp else ""
    line = f'[#{number}]{ts} Received on "{msg.subject}"'
    if msg.reply:
        line += f' with reply "{msg.reply}"'
    print(line)
    if not subjects_only:
        if msg.headers and (show_headers or headers_only):
            for key, value in msg.headers.items():
                print(f"{key}: {value}")
            print()
        if not headers_only:
            print(msg.data.decode(errors="replace"))
        print()
    sys.stdout.flush()


@click.command("sub", help="Subscribe to subjects and print what arrives")
@click.argument("subjects", nargs=-1, required=True)
@click.option("--queue", default="", help="Join this queue group")
@click.option("--raw", "-r", is_flag=True, help="Print only the message bodies")
@click.option(
    "--count", default=0, type=click.IntRange(min=0), help="Quit after this many messages"
)
@click.option("--wait", default=None, help="Quit after this long without messages (e.g. 5s)")
@click.option("--headers/--no-headers", "show_headers", default=True, help="Show message headers")
@click.option("--headers-only", is_flag=True, help="Show only headers, no bodies")
@click.option("--subjects-only", is_flag=True, help="Show only the subjects")
@click.option("--timestamp", "-t", is_flag=True, help="Show when each message arrived")
@connection
def sub_cmd(
    conn: ConnOptions,
    subjects: tuple[str, ...],
    queue: str,
    raw: bool,
    count: int,
    wait: str | None,
    show_headers: bool,
    headers_only: bool,
    subjects_only: bool,
    timestamp: bool,
) -> None:
    idle_s = _seconds(wait, "--wait")

    async def go() -> None:
        seen = [0]
        done = asyncio.Event()
        last = [time.monotonic()]

        async def on_msg(msg: Any) -> None:
            seen[0] += 1
            last[0] = time.monotonic()
            print_msg(
                msg,
                seen[0],
                raw=raw,
                show_headers=show_headers,
                headers_only=headers_only,
                subjects_only=subjects_only,
                stamp=timestamp,
            )
            if count and seen[0] >= count:
                done.set()

        async with connected(conn) as nc:
            for subject in subjects:
                await nc.subscribe(subject, queue=queue, cb=on_msg)
            await nc.flush()
            group = f" in queue group {queue}" if queue else ""
            log(f"Subscribing on {', '.join(subjects)}{group}")
            while not done.is_set():
                if idle_s and time.monotonic() - last[0] >= idle_s:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), 0.1)

    run(go())


@click.command("req", help="Send a request and print the replies")
@click.argument("subject")
@click.argument("body", required=False)
@HEADER_OPT
@click.option("--count", default=1, type=click.IntRange(min=1), help="Send this many requests")
@click.option(
    "--replies",
    default=1,
    type=click.IntRange(min=0),
    help="Replies to wait for per request (0: all until the timeout)",
)
@click.option(
    "--reply-timeout", default="300ms", help="Most time between replies when waiting for several"
)
@click.option("--raw", "-r", is_flag=True, help="Print only the reply bodies")
@click.option("--templates/--no-templates", default=True, help="Expand {{...}} in subject and body")
@connection
def req_cmd(
    conn: ConnOptions,
    subject: str,
    body: str | None,
    headers: tuple[str, ...],
    count: int,
    replies: int,
    reply_timeout: str,
    raw: bool,
    templates: bool,
) -> None:
    text, hdrs, gap = (
        _body_or_stdin(body),
        parse_headers(headers),
        _seconds(reply_timeout, "--reply-timeout"),
    )
    run(_requests(conn, subject, text, hdrs, count, replies, gap, raw, templates))


async def _requests(
    conn: ConnOptions,
    subject: str,
    body: str,
    hdrs: dict[str, str] | None,
    count: int,
    replies: int,
    gap_s: float,
    raw: bool,
    use_tpl: bool,
) -> None:
    async with connected(conn) as nc:
        for i in range(1, count + 1):
            subj = templates.render(subject, i) if use_tpl else subject
            data = (templates.render(body, i) if use_tpl else body).encode()
            if not raw:
                log(f'Sending request on "{subj}"')
            got = await _one_request(nc, subj, data, hdrs, replies, gap_s, conn.timeout_s, raw)
            if got == 0:
                raise CliError(f'no reply to a request on "{subj}" within {conn.timeout_s:g}s')


async def _one_request(
    nc: Any,
    subject: str,
    data: bytes,
    hdrs: dict[str, str] | None,
    want: int,
    gap_s: float,
    timeout_s: float,
    raw: bool,
) -> int:
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    start = time.monotonic()
    got = 0
    try:
        await nc.publish(subject, data, reply=inbox, headers=hdrs)
        while want == 0 or got < want:
            wait = timeout_s if got == 0 or want == 1 else gap_s
            if want == 0:
                wait = max(0.0, timeout_s - (time.monotonic() - start))
            try:
                msg = await sub.next_msg(timeout=max(0.001, wait))
            except nats.errors.TimeoutError:
                break
            if msg.headers and msg.headers.get("Status") == "503":
                raise CliError(f'no responders are available for "{subject}"')
            got += 1
            if not raw:
                log(f"Received with rtt {(time.monotonic() - start) * 1000:.3f}ms")
                for key, value in (msg.headers or {}).items():
                    print(f"{key}: {value}")
                if msg.headers:
                    print()
            print(msg.data.decode(errors="replace"), flush=True)
            if not raw:
                print()
    finally:
        await sub.unsubscribe()
    return got


@click.command("reply", help="Answer requests on a subject (a body template, --echo or --command)")
@click.argument("subject")
@click.argument("body", required=False)
@click.option("--echo", is_flag=True, help="Reply with the request itself")
@click.option("--command", "shell", default="", help="Reply with the output of this command")
@click.option("--queue", "-q", default="NATS-RPLY-22", help="Queue group to join")
@click.option(
    "--count", default=0, type=click.IntRange(min=0), help="Quit after this many requests"
)
@HEADER_OPT
@connection
def reply_cmd(
    conn: ConnOptions,
    subject: str,
    body: str | None,
    echo: bool,
    shell: str,
    queue: str,
    count: int,
    headers: tuple[str, ...],
) -> None:
    if not (echo or shell or body is not None):
        raise CliError("give a reply body, --echo or --command", 2)
    hdrs = parse_headers(headers)

    async def answer(msg: Any, number: int) -> bytes:
        if echo:
            return bytes(msg.data)
        if shell:
            proc = await asyncio.create_subprocess_shell(
                shell, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
            )
            out, _ = await proc.communicate(msg.data)
            return out
        return templates.render(body or "", number, msg.data.decode(errors="replace")).encode()

    async def go() -> None:
        seen = [0]
        done = asyncio.Event()

        async def on_msg(msg: Any) -> None:
            seen[0] += 1
            log(f'[#{seen[0]}] Received on subject "{msg.subject}":')
            print(msg.data.decode(errors="replace"), flush=True)
            if msg.reply:
                await nc.publish(msg.reply, await answer(msg, seen[0]), headers=hdrs)
            if count and seen[0] >= count:
                done.set()

        async with connected(conn) as nc:
            await nc.subscribe(subject, queue=queue, cb=on_msg)
            await nc.flush()
            log(f'Listening on "{subject}" in group "{queue}"')
            await done.wait()
            await nc.flush()

    run(go())
