"""Questions to the user: arrow-key menus on a terminal (questionary), lines on stdin otherwise.

When stdin is not a terminal a choice is read as one line (a listed name, or its number), so a
script can answer (``echo n4-c1 | jetraft s cluster peer-remove ORDERS``); end of input is an
error naming the flag that avoids the question.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
from collections.abc import Sequence
from typing import Any

from jetraft.cli.errors import CliError
from jetraft.cli.render import stdin_is_tty


def _ask(question: Any) -> Any:
    """Runs a questionary question to its answer.

    questionary starts its own event loop, which cannot nest inside the command's; when a
    loop is running the question runs on a helper thread (the command waits for the user
    anyway). Ctrl-C or end of input cancels.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        answer = question.ask()
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            answer = pool.submit(question.ask).result()
    if answer is None:
        raise CliError("cancelled")
    return answer


def _read_line(question: str, avoid: str) -> str:
    line = sys.stdin.readline()
    if not line:
        print(file=sys.stderr)
        hint = f" (or pass {avoid})" if avoid else ""
        raise CliError(f"{question}: no answer on stdin{hint}")
    return line.strip()


def select(question: str, choices: Sequence[str], avoid: str = "") -> str:
    """One of ``choices``; prints ``? <question> <answer>`` as the nats CLI's prompt does."""
    if not choices:
        raise CliError(f"{question}: nothing to choose from")
    if stdin_is_tty():
        import questionary

        return str(_ask(questionary.select(question, choices=list(choices))))
    for i, choice in enumerate(choices, 1):
        print(f"  {i}) {choice}", file=sys.stderr)
    print(f"? {question} ", end="", file=sys.stderr, flush=True)
    raw = _read_line(question, avoid)
    if raw.isdigit() and 1 <= int(raw) <= len(choices):
        picked = choices[int(raw) - 1]
    elif raw in choices:
        picked = raw
    else:
        raise CliError(f"{question}: {raw!r} is not one of {', '.join(choices)}")
    print(picked, file=sys.stderr)
    return picked


def confirm(question: str, avoid: str = "--force") -> bool:
    if stdin_is_tty():
        import questionary

        return bool(_ask(questionary.confirm(question, default=False)))
    print(f"? {question} (y/N) ", end="", file=sys.stderr, flush=True)
    raw = _read_line(question, avoid).lower()
    print(raw, file=sys.stderr)
    return raw in ("y", "yes")


def yes_no(question: str, default: bool) -> bool:
    """A yes/no question on a terminal; the default off a terminal."""
    if not stdin_is_tty():
        return default
    import questionary

    return bool(_ask(questionary.confirm(question, default=default)))


def text(question: str, default: str = "", required: bool = False) -> str:
    """A typed answer on a terminal; off a terminal the default is taken without asking."""
    if not stdin_is_tty():
        if required and not default:
            raise CliError(f"{question}: a value is required (give it as a flag)")
        return default
    import questionary

    while True:
        answer = str(_ask(questionary.text(question, default=default)))
        if answer.strip() or not required:
            return str(answer).strip()
