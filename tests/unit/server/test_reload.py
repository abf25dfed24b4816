"""What a configuration reload (SIGHUP) applies and what it refuses."""

from __future__ import annotations

from jetraft.config import parse_config
from jetraft.server.reload import changed_fields, plan


def test_logging_options_apply_and_anything_else_refuses_the_whole_reload() -> None:
    old = parse_config("listen: 127.0.0.1:4222\n")
    assert plan(old, parse_config("listen: 127.0.0.1:4222\n")) == ([], "")
    logging = parse_config("listen: 127.0.0.1:4222\ntrace: true\nlogtime: false\n")
    assert plan(old, logging) == (["trace", "logtime"], "")
    mixed = parse_config(
        "listen: 127.0.0.1:4222\ndebug: true\nmax_payload: 1024\n"
        "authorization { user: u, password: p }\n"
    )
    assert set(changed_fields(old, mixed)) == {"max_payload", "debug", "authorization"}
    fields, error = plan(old, mixed)
    assert fields == [] and error.startswith("config reload not supported for ")
    assert "authorization" in error and "max_payload" in error and "debug" not in error
