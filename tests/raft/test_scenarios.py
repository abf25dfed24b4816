"""Each transcript in scenarios/ replays to exactly its recorded trace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.raft.scenario import run_text

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.txt"))


def test_there_are_transcripts() -> None:
    names = {p.stem for p in SCENARIOS}
    assert {"first_election", "prevote_rejoin", "check_quorum", "figure8",
            "leader_isolated", "snapshot_catchup", "leader_transfer",
            "membership_partition", "corrupt_snapshot_keeps_acked"} <= names


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_transcript(path: Path, request: pytest.FixtureRequest) -> None:
    expected, actual = run_text(path.read_text())
    rewrite = request.config.getoption("--rewrite", default=False) or os.environ.get(
        "JETRAFT_REWRITE") == "1"
    if rewrite and expected != actual:
        path.write_text(actual)
        return
    assert actual == expected, f"{path.name}: trace differs; rerun with --rewrite to accept"
