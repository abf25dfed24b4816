"""Consumer errors: the shared nats-server catalogue (``jetstream.errors``) under the short
names the consumer modules use."""

from __future__ import annotations

from jetraft.jetstream.errors import ApiError, api_error

ConsumerError = ApiError
cerr = api_error

__all__ = ["ConsumerError", "cerr"]
