"""Body and subject templates of ``pub``, ``req`` and ``reply``: ``{{Count}}``, ``{{ID}}``,
``{{TimeStamp}}``, ``{{Unix}}``, ``{{UnixNano}}``, ``{{Time}}``, ``{{Random 10 20}}`` and, for
``reply``, ``{{Request}}`` (the request's body) -- the functions the nats CLI offers."""

from __future__ import annotations

import random
import re
import secrets
import string
import time
from datetime import datetime

from jetraft.cli.errors import CliError

_CALL = re.compile(r"\{\{\s*\.?(\w+)((?:\s+\d+)*)\s*\}\}")


def _random_text(args: list[int]) -> str:
    low, high = [*args, 20, 20][:2]
    if len(args) == 1:
        high = low
    if high < low:
        low, high = high, low
    alphabet = string.ascii_letters + string.digits
    return "".join(random.choice(alphabet) for _ in range(random.randint(low, high)))


def render(template: str, count: int, request: str | None = None) -> str:
    """``template`` with every ``{{Func args}}`` replaced; unknown functions are an error."""
    now = datetime.now().astimezone()

    def replace(m: re.Match[str]) -> str:
        name, args = m.group(1), [int(a) for a in m.group(2).split()]
        if name in ("Count", "Cnt"):
            return str(count)
        if name == "ID":
            return secrets.token_hex(11)
        if name == "Unix":
            return str(int(time.time()))
        if name == "UnixNano":
            return str(time.time_ns())
        if name == "TimeStamp":
            return now.isoformat(timespec="seconds")
        if name == "Time":
            return now.strftime("%-I:%M%p")
        if name == "Random":
            return _random_text(args)
        if name == "Request" and request is not None:
            return request
        raise CliError(f"unknown template function {name!r} in {template!r}", 2)

    return _CALL.sub(replace, template)
