"""An account's JetStream limits: what INFO reports and what creating a stream must respect
(shared by the single-server and the clustered JetStream)."""

from __future__ import annotations

from typing import Any

from jetraft.config.model import AccountJetStreamConfig, JetStreamConfig
from jetraft.jetstream import errors as E
from jetraft.jetstream.stream_config import StreamConfig


def limits_body(js: JetStreamConfig, lim: AccountJetStreamConfig | None) -> dict[str, Any]:
    """The ``limits`` object of $JS.API.INFO (unlimited = -1)."""
    if lim is None:
        return {
            "max_memory": js.max_memory_store,
            "max_storage": js.max_file_store,
            "max_streams": -1,
            "max_consumers": -1,
            "max_ack_pending": -1,
            "memory_max_stream_bytes": -1,
            "storage_max_stream_bytes": -1,
            "max_bytes_required": False,
        }
    return {
        "max_memory": lim.max_memory,
        "max_storage": lim.max_store,
        "max_streams": lim.max_streams,
        "max_consumers": lim.max_consumers,
        "max_ack_pending": lim.max_ack_pending,
        "memory_max_stream_bytes": lim.memory_max_stream_bytes,
        "storage_max_stream_bytes": lim.store_max_stream_bytes,
        "max_bytes_required": lim.max_bytes_required,
    }


def check_stream_limits(
    lim: AccountJetStreamConfig | None, cfg: StreamConfig, streams: int, creating: bool
) -> None:
    """Raise the ApiError nats-server answers when ``cfg`` breaks the account's limits;
    ``streams`` is how many the account has now."""
    if lim is None:
        return
    if creating and 0 <= lim.max_streams <= streams:
        raise E.api_error(10027)
    if lim.max_bytes_required and cfg.max_bytes <= 0:
        raise E.api_error(10113)
    stream_cap = (
        lim.memory_max_stream_bytes if cfg.storage == "memory" else lim.store_max_stream_bytes
    )
    if stream_cap > 0 and cfg.max_bytes > stream_cap:
        raise E.api_error(10122)
