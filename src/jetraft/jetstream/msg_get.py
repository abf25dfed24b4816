"""The message-get request body (``STREAM.MSG.GET`` and ``DIRECT.GET``): msgspec Structs, in a
module of their own.

``jetraft.jetstream.direct_get`` serves the direct form and may be compiled (mypyc, the
optional accelerated build); a Struct class compiled by mypyc loses its class keywords
(``forbid_unknown_fields`` here), so the Structs stay in this pure module. Keep it free of
logic beyond the decoding.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

# Go's uint64 fields: a negative number is a decode error there.
Uint64 = Annotated[int, msgspec.Meta(ge=0)]


class MsgGetRequest(msgspec.Struct, forbid_unknown_fields=True):
    seq: Uint64 = 0
    last_by_subj: str = ""
    next_by_subj: str = ""
    batch: int = 0
    max_bytes: int = 0
    start_time: str | None = None
    multi_last: list[str] | None = None
    up_to_seq: Uint64 = 0
    up_to_time: str | None = None
    no_hdr: bool = False


class LenientMsgGet(MsgGetRequest, forbid_unknown_fields=False):
    """DIRECT.GET decodes leniently (nats-server uses plain json.Unmarshal there)."""
