"""The connector's pure parts: options, offsets and ranges, headers, ids (no Spark, no server)."""

from __future__ import annotations

import itertools

import pytest

from jetraft.spark.codec import (
    encode_header_block,
    parse_ack_subject,
    parse_header_block,
    subject_matches,
    user_headers,
)
from jetraft.spark.options import (
    OptionError,
    Position,
    parse_read_options,
    parse_timestamp_ns,
    parse_write_options,
)
from jetraft.spark.planning import Admission, capped_end, offset_seq, split_ranges


def test_read_options_defaults_and_case() -> None:
    opts = parse_read_options(
        {"STREAM": "ORDERS", "Subjects": "a.*, b.>", "startingSequence": "7"}, streaming=False
    )
    assert opts.stream == "ORDERS"
    assert opts.subjects == ("a.*", "b.>")
    assert opts.starting == Position("sequence", 7)
    assert opts.ending == Position("latest")
    assert opts.conn.servers == ("nats://127.0.0.1:4222",)
    assert opts.fail_on_data_loss is True


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({}, "option stream is required"),
        ({"stream": "A.B"}, "not a valid stream name"),
        ({"stream": "S", "startingSequence": "-1"}, "must be >= 1"),
        ({"stream": "S", "startingSequence": "1", "startingTimestamp": "5"}, "are exclusive"),
        ({"stream": "S", "subjects": "a.>.b"}, "not a valid subject filter"),
        ({"stream": "S", "servers": "http://x/"}, "not a nats://host:port URL"),
        ({"stream": "S", "includeHeaders": "maybe"}, "must be true or false"),
        ({"stream": "S", "startingTimestamp": "yesterday"}, "epoch milliseconds or an ISO"),
        ({"stream": "S", "readMode": "fast"}, "readMode must be"),
        ({"stream": "S", "tlsCertFile": "c.pem"}, "must be given together"),
    ],
)
def test_bad_read_options(opts: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_read_options(opts, streaming=False)


def test_streaming_rejects_ending_bounds() -> None:
    with pytest.raises(OptionError, match="batch reads only"):
        parse_read_options({"stream": "S", "endingSequence": "9"}, streaming=True)


def test_timestamps() -> None:
    assert parse_timestamp_ns("t", "1500") == 1_500_000_000
    assert parse_timestamp_ns("t", "1970-01-01T00:00:01.5Z") == 1_500_000_000
    assert parse_timestamp_ns("t", "1970-01-01T01:00:00+01:00") == 0


def test_write_options() -> None:
    opts = parse_write_options({"subject": "out.x", "commitBucket": ""})
    assert opts.subject == "out.x" and opts.commit_bucket is None
    assert parse_write_options({}).commit_bucket == "jetraft_spark_commits"
    with pytest.raises(OptionError, match="must not contain wildcards"):
        parse_write_options({"subject": "out.*"})
    with pytest.raises(OptionError, match="needs _failOnceMarker"):
        parse_write_options({"_failOnceAtRow": "3"})


def test_split_ranges_cover_exactly() -> None:
    ranges = split_ranges(10, 1009, min_partitions=3, max_records_per_partition=300)
    assert len(ranges) == 4
    assert ranges[0].start == 10 and ranges[-1].end == 1009
    assert all(a.end + 1 == b.start for a, b in itertools.pairwise(ranges))
    assert max(r.end - r.start + 1 for r in ranges) <= 300
    assert split_ranges(5, 4, 2, 10) == []
    assert len(split_ranges(1, 2, 8, 10)) == 2  # never more ranges than sequences


def test_offsets_and_caps() -> None:
    assert offset_seq({"seq": 5}) == 5
    with pytest.raises(ValueError, match="not a jetstream offset"):
        offset_seq({"partition": 1})
    assert capped_end(10, 1000, 100) == 110
    assert capped_end(10, 50, 100) == 50
    assert capped_end(10, 3, None) == 10  # a purged stream never moves offsets back


def test_admission_min_and_max_per_trigger() -> None:
    both = Admission(max_rows=100, min_rows=30, max_delay_s=60.0)
    assert both.end(10, 25, waited_s=0.0) == 10  # 15 waiting < 30: no batch yet
    assert both.end(10, 25, waited_s=59.9) == 10
    assert both.end(10, 25, waited_s=60.0) == 25  # the delay is over: what there is
    assert both.end(10, 40, waited_s=0.0) == 40  # 30 waiting: a batch
    assert both.end(10, 500, waited_s=0.0) == 110  # capped at 100
    assert both.end(10, 10, waited_s=1e9) == 10  # nothing waiting: never a batch
    assert Admission().end(10, 500, waited_s=0.0) == 500
    assert Admission(min_rows=5).end(10, 3, waited_s=1e9) == 10  # purged: never backwards


def test_trigger_options() -> None:
    opts = parse_read_options(
        {"stream": "S", "minMessagesPerTrigger": "5", "maxTriggerDelay": "2m"}, streaming=True
    )
    assert (opts.min_messages_per_trigger, opts.max_trigger_delay_s) == (5, 120.0)
    assert parse_read_options({"stream": "S"}, streaming=True).max_trigger_delay_s == 900.0
    for raw, seconds in (("250ms", 0.25), ("1500", 1.5), ("30 s", 30.0), ("1h", 3600.0)):
        parsed = parse_read_options({"stream": "S", "maxTriggerDelay": raw}, streaming=True)
        assert parsed.max_trigger_delay_s == seconds
    with pytest.raises(OptionError, match="maxTriggerDelay must be a duration"):
        parse_read_options({"stream": "S", "maxTriggerDelay": "soon"}, streaming=True)
    with pytest.raises(OptionError, match=r"minMessagesPerTrigger \(10\) is above"):
        parse_read_options(
            {"stream": "S", "minMessagesPerTrigger": "10", "maxMessagesPerTrigger": "5"},
            streaming=True,
        )


def test_header_blocks_round_trip_repeated_names() -> None:
    block = encode_header_block([("A", "1"), ("A", "2\r\nInjected: x"), ("B", "3")])
    parsed = parse_header_block(block)
    assert parsed.status is None
    assert user_headers(parsed) == {"A": ["1", "2  Injected: x"], "B": ["3"]}
    status = parse_header_block(b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\n\r\n")
    assert (status.status, status.description, status.get("Nats-Num-Pending")) == (204, "EOB", "0")
    with pytest.raises(ValueError, match="invalid header name"):
        encode_header_block([("bad name", "x")])


def test_ack_subjects_and_subject_filters() -> None:
    meta = parse_ack_subject("$JS.ACK.S.C.1.42.7.1700000000000000000.3")
    assert (meta.stream_seq, meta.timestamp_ns, meta.pending) == (42, 1700000000000000000, 3)
    v2 = parse_ack_subject("$JS.ACK.dom.hash.S.C.1.43.8.1700000000000000001.0.tok")
    assert (v2.stream_seq, v2.pending) == (43, 0)
    assert subject_matches("a.*.c", "a.b.c") and not subject_matches("a.*", "a.b.c")
    assert subject_matches("a.>", "a.b.c") and not subject_matches("a.>", "a")


def test_nats_py_internals_the_fast_paths_override_are_still_there() -> None:
    """JetClient (spark/loop.py) replaces nats-py's protocol parser (spark/bulkparse.py) and
    calls private nats-py methods for read and publish speed; a nats-py release that changes
    them must fail here, loudly, rather than in an executor."""
    import inspect

    from nats.aio.client import Client
    from nats.protocol import command, parser

    from jetraft.spark.loop import JetClient

    # The read loop feeds whatever parser sits in _ps; the parser calls these back.
    assert "self._ps.parse(" in inspect.getsource(Client._read_loop)
    params = list(inspect.signature(Client._process_msg).parameters)
    assert params == ["self", "sid", "subject", "reply", "data", "headers"]
    for name, args in [
        ("_process_ping", ["self"]),
        ("_process_pong", ["self"]),
        ("_process_err", ["self", "err_msg"]),
        ("_process_info", ["self", "info", "initial_connection"]),
    ]:
        method = getattr(Client, name)
        assert inspect.iscoroutinefunction(method), name
        assert list(inspect.signature(method).parameters) == args, name
    assert list(inspect.signature(Client._process_headers).parameters) == ["self", "headers"]
    assert inspect.iscoroutinefunction(parser.Parser.parse)
    assert isinstance(parser.MAX_CONTROL_LINE_SIZE, int)
    for name in ("_send_command", "_flush_pending"):
        assert inspect.iscoroutinefunction(getattr(Client, name)), name
    assert list(inspect.signature(command.hpub_cmd).parameters)[:4] == [
        "subject", "reply", "hdr", "payload"
    ]
    client = JetClient()
    for name in ("_max_payload", "_flush_queue", "_max_pending_size", "_pending_data_size"):
        assert hasattr(client, name), name
    assert client._ps is client._bulk  # the replacement parser is the one in use
