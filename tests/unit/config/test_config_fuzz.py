"""Whatever the text, parsing ends in a ServerConfig or a ConfigError, never another exception."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jetraft.config import ConfigError, ServerConfig, parse_config

ENV = {"JR_FUZZ_PORT": "4222", "JR_FUZZ_BAD": "x y", "JR_FUZZ_LOOP": "$JR_FUZZ_LOOP"}

# Pieces that mean something to the lexer, so random joins reach deep into it.
TOKENS = [
    "{", "}", "[", "]", "(", ")\n", ",", ";", "=", ":", " ", "\t", "\n", "\r\n", "#", "//",
    '"', "'", "\\", "\\x4", "\\t", "$", "${", "$JR_FUZZ_PORT", "$JR_FUZZ_BAD", "$JR_FUZZ_LOOP",
    "$2a$11$abc", "include ", "include ./x.conf\n", "port", "listen", "cluster", "jetstream",
    "accounts", "$SYS", "users", "user", "password", "permissions", "publish", "allow",
    "deny", "allow_responses", "routes", "authorization", "tls", "store_dir", "sync_interval",
    "max_payload", "ping_interval", "true", "off", "0", "-1", "4222", "1.5", "2m", "1KB",
    "1KBB", "10s", "0.0.0.0:6222", "nats://h:6222", "2016-05-04T18:53:41Z", "9999999999999999999",
    "-", ".", "é", "\x00",
]

KEYS = [
    "port", "listen", "host", "http", "http_port", "server_name", "max_payload", "max_pending",
    "max_control_line", "max_connections", "ping_interval", "ping_max", "write_deadline",
    "lame_duck_duration", "lame_duck_grace_period", "debug", "trace", "server_tags",
    "no_auth_user", "system_account", "store_dir", "accounts", "authorization", "tls",
    "jetstream", "cluster", "users", "user", "password", "pass", "token", "timeout",
    "permissions", "publish", "subscribe", "allow", "deny", "allow_responses", "max", "expires",
    "name", "routes", "cert_file", "key_file", "verify", "enabled", "sync_interval", "domain",
    "max_mem", "max_file", "$SYS", "APP", "no_advertise", "connect_retries", "unknown_key",
]
SCALARS = st.one_of(
    st.integers(min_value=-70_000, max_value=2**40).map(str),
    st.sampled_from(["true", "false", "enabled", "always", "1.5", "-1", "0", "2m", "\"2m\"",
                     "\"1h30m\"", "\"-3s\"", "1GB", "\"1G\"", "127.0.0.1:-1", ":4222",
                     "\"[::1]:4222\"", "nats://a:1", "\"a.>\"", "\"a..b\"", "\"x y\"", "foo"]),
)


def _value(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    block = st.lists(st.tuples(st.sampled_from(KEYS), children), max_size=4).map(
        lambda kvs: "{ " + "\n".join(f"{k}: {v}" for k, v in kvs) + " }"
    )
    array = st.lists(children, max_size=4).map(lambda vs: "[" + ", ".join(vs) + "]")
    return st.one_of(block, array)


VALUES = st.recursive(SCALARS, _value, max_leaves=12)
DOCUMENTS = st.lists(st.tuples(st.sampled_from(KEYS), VALUES), max_size=8).map(
    lambda kvs: "\n".join(f"{k} = {v}" for k, v in kvs)
)


@pytest.fixture(scope="module")
def empty_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _parse_never_crashes(text: str, base: Path) -> None:
    try:
        cfg = parse_config(text, str(base / "fuzz.conf"), env=ENV, base_dir=base)
    except ConfigError as exc:
        assert exc.message
        assert str(exc)
    else:
        assert isinstance(cfg, ServerConfig)


FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FUZZ
@given(st.text(max_size=200))
def test_random_text(empty_dir: Path, text: str) -> None:
    _parse_never_crashes(text, empty_dir)


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=40).map("".join))
def test_random_token_soup(empty_dir: Path, text: str) -> None:
    _parse_never_crashes(text, empty_dir)


@FUZZ
@given(DOCUMENTS)
def test_well_formed_documents_with_random_values(empty_dir: Path, text: str) -> None:
    # Syntax is fine here, so this mostly exercises the typed validation.
    _parse_never_crashes(text, empty_dir)
