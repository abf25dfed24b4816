"""Gaps found by running nats.js's own test suite against jetraft, checked side by side with
a real nats-server: the same scenario on both, the same answers expected."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.integration.jetstream.consumer_support import nats_server_binary, on_both_servers

pytestmark = pytest.mark.skipif(
    not Path(nats_server_binary()).exists(), reason="nats-server binary not installed"
)


async def _publish(nc: nats.NATS, subject: str, headers: dict[str, str]) -> Any:
    """The PubAck's sequence, or the error code of a refused publish."""
    msg = await nc.request(subject, b"x", timeout=2, headers=headers)
    ack = json.loads(msg.data)
    return ack["error"]["err_code"] if "error" in ack else ack["seq"]


async def _last_subject_seq_scenario(url: str) -> list[Any]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        config = {"name": "W", "subjects": ["w.>"]}
        await nc.request("$JS.API.STREAM.CREATE.W", json.dumps(config).encode(), timeout=2)
        for subject in ("w.1.a", "w.1.b", "w.2.a"):  # seqs 1, 2, 3
            await nc.request(subject, b"x", timeout=2)
        out = []
        # (subject, expected last seq, the subject or filter the check is made on)
        for subject, seq, on in [
            ("w.1.c", 1, "w.1.*"),  # the last of w.1.* is 2: refused
            ("w.1.c", 3, "w.1.*"),  # 3 is w.2.a's: refused
            ("w.1.c", 2, "w.1.*"),  # right: stored as 4
            ("w.1.a", 4, "w.1.*"),  # w.1.c moved the filter's last to 4: stored as 5
            ("w.3.a", 0, "w.3.*"),  # nothing matches yet: 0 is right
            ("w.2.b", 6, "w.>"),  # a full wildcard: the stream's last
            ("w.1.a", 5, "w.1.a"),  # a literal subject still works
        ]:
            hdrs = {"Nats-Expected-Last-Subject-Sequence": str(seq),
                    "Nats-Expected-Last-Subject-Sequence-Subject": on}
            out.append(await _publish(nc, subject, hdrs))
        return out
    finally:
        await nc.close()


async def test_expected_last_subject_sequence_on_a_wildcard_filter(tmp_path: Path) -> None:
    """Nats-Expected-Last-Subject-Sequence-Subject may be a filter with wildcards: the check is
    against the last message matching it (nats.js publishes with such filters)."""
    theirs, ours = await on_both_servers(tmp_path, _last_subject_seq_scenario)
    assert ours == theirs
    assert theirs == [10071, 10071, 4, 5, 6, 7, 8]
