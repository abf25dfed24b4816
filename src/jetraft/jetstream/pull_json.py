"""The JSON body of a pull request (``CONSUMER.MSG.NEXT``) as a msgspec Struct, and its decoder.

Apart from ``pull.py`` because that module may be compiled (mypyc) and this one must not be:
mypyc builds a Struct class in a compiled module with field types msgspec cannot read
(docs/architecture.md, "The compiled build").
"""

from __future__ import annotations

import msgspec


class PullJSON(msgspec.Struct):
    batch: int | None = None
    expires: int | None = None
    max_bytes: int | None = None
    no_wait: bool | None = None
    idle_heartbeat: int | None = None
    group: str | None = None
    min_pending: int | None = None
    min_ack_pending: int | None = None
    id: str | None = None
    priority: int | None = None


PULL_DECODER = msgspec.json.Decoder(PullJSON)
