"""JetStream message stores: the ``StreamStore`` protocol, a memory and a file implementation.

See ``types`` for the contract both keep, ``file`` for the on-disk format and durability.
"""

from jetraft.jetstream.store._recovery import MSGS_DIR
from jetraft.jetstream.store.file import FileStore
from jetraft.jetstream.store.memory import MemoryStore
from jetraft.jetstream.store.types import (
    ERR_MAX_BYTES,
    ERR_MAX_MSG_SIZE,
    ERR_MAX_MSGS,
    ERR_MAX_MSGS_PER_SUBJECT,
    Filters,
    Limits,
    StoreClosed,
    StoreCorruption,
    StoredMsg,
    StoreError,
    StoreState,
    StreamStore,
    file_msg_size,
    memory_msg_size,
)

__all__ = [
    "ERR_MAX_BYTES",
    "ERR_MAX_MSGS",
    "ERR_MAX_MSGS_PER_SUBJECT",
    "ERR_MAX_MSG_SIZE",
    "MSGS_DIR",
    "FileStore",
    "Filters",
    "Limits",
    "MemoryStore",
    "StoreClosed",
    "StoreCorruption",
    "StoreError",
    "StoreState",
    "StoredMsg",
    "StreamStore",
    "file_msg_size",
    "memory_msg_size",
]
