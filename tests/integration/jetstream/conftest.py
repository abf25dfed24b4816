"""Fixtures shared by the JetStream integration tests (see consumer_support.py)."""

from tests.integration.jetstream.consumer_support import js_url, nc

__all__ = ["js_url", "nc"]
