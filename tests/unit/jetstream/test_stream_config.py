"""StreamConfig decoding, normalisation and encoding (no server)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jetraft.jetstream.errors import ApiError
from jetraft.jetstream.stream_config import (
    DEFAULT_DUPLICATE_WINDOW_NS,
    StreamConfig,
    check_update,
    decode_request,
    from_wire,
    normalise,
    to_wire,
)

S = 1_000_000_000


def cfg_of(**kw: Any) -> StreamConfig:
    return normalise(decode_request(json.dumps({"name": "S", **kw}).encode()))


def error_of(**kw: Any) -> tuple[int, str]:
    with pytest.raises(ApiError) as exc:
        cfg_of(**kw)
    return exc.value.err_code, exc.value.description


def test_defaults() -> None:
    cfg = cfg_of()
    assert cfg.subjects == ("S",)
    assert (cfg.max_msgs, cfg.max_bytes, cfg.max_msg_size, cfg.max_consumers) == (-1, -1, -1, -1)
    assert cfg.duplicate_window == DEFAULT_DUPLICATE_WINDOW_NS
    assert (cfg.num_replicas, cfg.storage, cfg.retention, cfg.discard) == (
        1,
        "file",
        "limits",
        "old",
    )


def test_duplicate_window_follows_max_age() -> None:
    assert cfg_of(max_age=30 * S).duplicate_window == 30 * S
    assert cfg_of(max_age=600 * S).duplicate_window == DEFAULT_DUPLICATE_WINDOW_NS
    assert error_of(max_age=30 * S, duplicate_window=60 * S) == (
        10052,
        "duplicates window can not be larger then max age",
    )
    assert error_of(duplicate_window=S // 100)[0] == 10052


def test_subject_delete_marker_turns_on_ttl_and_rollups() -> None:
    cfg = cfg_of(subject_delete_marker_ttl=5 * S)
    assert cfg.allow_msg_ttl and cfg.allow_rollup_hdrs and not cfg.deny_purge
    assert error_of(subject_delete_marker_ttl=S // 2)[0] == 10052


def test_pedantic_refuses_silent_fixes() -> None:
    assert cfg_of(max_msgs=-5).max_msgs == -1
    assert error_of(max_msgs=-5, pedantic=True) == (
        10157,
        "pedantic mode: max_msgs must be set to -1",
    )


def test_strict_and_lenient_decoding() -> None:
    with pytest.raises(ApiError) as exc:
        decode_request(b'{"name": "S", "nope": 1}')
    assert exc.value.description == 'invalid JSON: json: unknown field "nope"'
    assert decode_request(b'{"name": "S", "nope": 1}', strict=False).name == "S"
    assert decode_request(b"").name == ""
    assert decode_request(b"null").name == ""


def test_update_rules() -> None:
    old = cfg_of(deny_delete=True)
    with pytest.raises(ApiError):
        check_update(old, cfg_of())
    sealed = check_update(cfg_of(), cfg_of(sealed=True, max_age=10 * S, allow_rollup_hdrs=True))
    assert sealed.sealed and sealed.deny_delete and sealed.deny_purge
    assert (sealed.max_age, sealed.discard, sealed.allow_rollup_hdrs) == (0, "new", False)


_configs = st.fixed_dictionaries(
    {},
    optional={
        "subjects": st.lists(st.sampled_from(["a", "b.*", "c.>", "d.e"]), unique=True, max_size=4),
        "retention": st.sampled_from(["limits", "interest", "workqueue"]),
        "max_msgs": st.integers(-3, 10**6),
        "max_bytes": st.integers(-3, 10**9),
        "max_age": st.sampled_from([0, S, 3600 * S]),
        "max_msgs_per_subject": st.integers(-1, 64),
        "max_msg_size": st.integers(-1, 2**20),
        "discard": st.sampled_from(["old", "new"]),
        "storage": st.sampled_from(["file", "memory"]),
        "allow_rollup_hdrs": st.booleans(),
        "deny_delete": st.booleans(),
        "allow_direct": st.booleans(),
        "allow_msg_ttl": st.booleans(),
        "description": st.text(max_size=20),
        "metadata": st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
        "first_seq": st.integers(0, 100),
        "compression": st.sampled_from(["none", "s2"]),
        "no_ack": st.booleans(),
    },
)


@settings(max_examples=200, deadline=None)
@given(_configs)
def test_encode_decode_roundtrip(raw: dict[str, Any]) -> None:
    """What is persisted (to_wire) reads back (from_wire) as the same config."""
    try:
        cfg = cfg_of(**raw)
    except ApiError:
        return
    wire = to_wire(cfg)
    assert from_wire(json.dumps(wire).encode()) == cfg
    assert to_wire(from_wire(json.dumps(wire).encode())) == wire
