"""Suite-wide settings: async tests run on uvloop, the loop production uses."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is a dependency where it installs
    uvloop = None  # type: ignore[assignment]


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    if uvloop is not None:
        return {"uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}
