"""The CLI's pure parts: parsing flags' values, rendering pages, templates (no servers)."""

from __future__ import annotations

import re

import pytest

from jetraft.cli import templates
from jetraft.cli.consumer_cmd import ack_metadata
from jetraft.cli.errors import CliError
from jetraft.cli.options import resolve
from jetraft.cli.render import Columns, Table
from jetraft.cli.stream_config import apply, new_config
from jetraft.cli.stream_view import peer_cell, replica_line, stream_info_page
from jetraft.cli.units import (
    go_duration_ns,
    human_duration_ns,
    ibytes,
    parse_duration_ns,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("1h30m", 5400 * 10**9),
        ("500ms", 5 * 10**8),
        ("2.5s", 25 * 10**8),
        ("10", 10 * 10**9),
        ("1d", 86400 * 10**9),
        ("-1", 0),
        ("unlimited", 0),
    ],
)
def test_durations(text: str, ns: int) -> None:
    assert parse_duration_ns(text) == ns


@pytest.mark.parametrize("bad", ["forever", "1x", "h1", "1h30"])
def test_bad_durations(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration_ns(bad)


def test_sizes_and_human_forms() -> None:
    assert parse_size("1KB") == parse_size("1KiB") == 1024
    assert parse_size("1.5GB") == int(1.5 * 1024**3)
    assert parse_size("-1") == -1
    with pytest.raises(ValueError):
        parse_size("12 parsecs")
    assert ibytes(0) == "0 B" and ibytes(1536) == "1.5 KiB" and ibytes(256_000) == "250 KiB"
    assert human_duration_ns(70_000_000) == "0.07s"
    assert human_duration_ns(65 * 10**9) == "1m5s"
    assert go_duration_ns(120 * 10**9) == "2m0s" and go_duration_ns(30 * 10**9) == "30s"


def test_replica_lines() -> None:
    assert (
        replica_line({"name": "n4-c1", "current": True, "active": 70_000_000})
        == "n4-c1, current, seen 0.07s ago"
    )
    assert replica_line({"name": "n2-c1", "current": False, "active": 420_000_000, "lag": 3}) == (
        "n2-c1, outdated, seen 0.42s ago, 3 operations behind"
    )
    assert replica_line({"name": "n5-c1", "current": False, "offline": True, "active": 0}) == (
        "n5-c1, outdated, OFFLINE, not seen"
    )
    cluster = {
        "leader": "n1-c1",
        "replicas": [{"name": "n3-c1", "current": True}, {"name": "n2-c1", "current": False}],
    }
    assert peer_cell(cluster) == "n1-c1*, n2-c1!, n3-c1"


def test_stream_page_has_the_seeds_shape() -> None:
    info = {
        "created": "2021-02-05T11:07:34.123456789Z",
        "ts": "2021-02-05T11:08:00Z",
        "config": new_config("ORDERS") | {"num_replicas": 3, "duplicate_window": 120 * 10**9},
        "cluster": {
            "name": "C1",
            "leader": "n1-c1",
            "replicas": [
                {"name": "n4-c1", "current": True, "active": 70_000_000},
                {"name": "n2-c1", "current": False, "active": 420_000_000},
            ],
        },
        "state": {"messages": 0, "bytes": 0, "first_seq": 0, "last_seq": 0, "consumer_count": 0},
    }
    text = stream_info_page(info).render()
    assert re.match(
        r"Information for Stream ORDERS created 2021-02-05T\d\d:07:34[+-]\d\d:\d\d\n\n"
        r"Configuration:\n",
        text,
    )
    cluster_part = text[text.index("Cluster Information:") : text.index("State:")]
    assert re.fullmatch(
        r"Cluster Information:\n\n\s+Name: C1\n\s+Leader: n1-c1\n"
        r"\s+Replica: n4-c1, current, seen 0\.07s ago\n"
        r"\s+Replica: n2-c1, outdated, seen 0\.42s ago\n\n",
        cluster_part,
    )
    assert re.search(r"^\s+Replicas: 3$", text, re.M)
    # Non-clustered (a single server): no cluster section at all.
    single = stream_info_page(info | {"cluster": {"leader": "jr-1"}}).render()
    assert "Cluster Information" not in single


def test_columns_align_and_plain_tables() -> None:
    cols = Columns("Heading")
    cols.title("One")
    cols.row("A", 1_000)
    cols.row("Longer label", True)
    lines = cols.render().splitlines()
    assert lines[:4] == ["Heading", "", "One:", ""]
    assert lines[4].index(":") == lines[5].index(":")
    assert lines[4].endswith("A: 1,000") and lines[5].endswith("Longer label: true")
    table = Table("T", ["Name", "N"])
    table.add("x", 5)
    table.add("longer", 12345)
    assert table.render_plain() == "T\n\nName    N\nx       5\nlonger  12,345"


def test_stream_flags_apply() -> None:
    cfg = apply(
        new_config("S"),
        {
            "storage": "m",
            "retention": "workq",
            "max_bytes": "1KB",
            "max_age": "1h",
            "tags": ("a,b",),
            "discard_per_subject": True,
            "metadata": ("k=v",),
        },
    )
    assert cfg["storage"] == "memory" and cfg["retention"] == "workqueue"
    assert cfg["max_bytes"] == 1024 and cfg["max_age"] == 3600 * 10**9
    assert cfg["placement"] == {"tags": ["a", "b"]}
    assert cfg["discard"] == "new" and cfg["discard_new_per_subject"] is True
    assert cfg["metadata"] == {"k": "v"}
    with pytest.raises(CliError):
        apply(new_config("S"), {"metadata": ("novalue",)})


def test_templates() -> None:
    assert templates.render("n{{Count}}-{{ .Count }}", 7) == "n7-7"
    assert templates.render("{{Request}}!", 1, "ping") == "ping!"
    assert len(templates.render("{{Random 5 5}}", 1)) == 5
    with pytest.raises(CliError, match="unknown template function 'Nope'"):
        templates.render("{{Nope}}", 1)


def test_ack_subjects() -> None:
    assert ack_metadata("$JS.ACK.S.C.2.10.4.1700000000000000000.5") == (2, 10, 4, 5)
    assert ack_metadata("$JS.ACK.dom.hash123.S.C.1.3.3.1700000000000000000.0.tok") == (1, 3, 3, 0)
    assert ack_metadata("_INBOX.x") is None


def test_user_without_password_is_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NATS_URL", "NATS_USER", "NATS_PASSWORD", "NATS_CONTEXT"):
        monkeypatch.delenv(var, raising=False)
    opts = resolve({"user": "s3cr3t", "no_context": True})
    assert (opts.user, opts.token) == ("", "s3cr3t")
    monkeypatch.setenv("NATS_URL", "a:1,b:2")
    assert resolve({"no_context": True}).servers == ("a:1", "b:2")
    assert resolve({"no_context": True, "server": "c:3"}).servers == ("c:3",)
    with pytest.raises(CliError):
        resolve({"no_context": True, "timeout": "0s"})
