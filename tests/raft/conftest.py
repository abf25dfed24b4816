"""`pytest tests/raft --rewrite` regenerates the expected traces of the transcripts."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--rewrite", action="store_true", default=False,
        help="rewrite raft scenario transcripts with the actual traces",
    )
