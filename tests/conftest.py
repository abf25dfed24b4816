"""Suite-wide settings: tests run on uvloop, the loop production uses."""

from __future__ import annotations

import asyncio

import pytest

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is a dependency where it installs
    uvloop = None  # type: ignore[assignment]


@pytest.fixture(scope="session")
def event_loop_policy() -> asyncio.AbstractEventLoopPolicy:
    if uvloop is not None:
        return uvloop.EventLoopPolicy()
    return asyncio.DefaultEventLoopPolicy()
