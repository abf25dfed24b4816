"""Account exports and imports: typed values, nats-server's checks and texts (recorded from
nats-server 2.15.1 ``-t``; tests/integration/test_core_imports.py compares them live), and
the sub-keys jetraft refuses."""

from __future__ import annotations

import pytest

from jetraft.config import ConfigError, parse_config
from jetraft.config.model import (
    DEFAULT_RESPONSE_THRESHOLD_NS,
    RESPONSE_CHUNKED,
    RESPONSE_SINGLETON,
    RESPONSE_STREAM,
    AccountExport,
    AccountImport,
)

OK = """
accounts {
  A {
    exports [
      {stream: "a.>"}
      {stream: "r.>", accounts: [B]}
      {service: "svc.>"}
      {service: "many", response_type: stream, response_threshold: "5s"}
      {service: "chunks", response: chunked}
    ]
  }
  B {
    imports [
      {stream: {account: A, subject: "a.>"}, prefix: "p"}
      {stream: {account: A, subject: "r.*"}, to: "mine.*"}
      {service: {account: A, subject: "svc.>"}, to: "local.svc.>"}
      {service: {account: A, subject: "many"}}
    ]
  }
}
"""


def _accounts(text: str) -> dict[str, tuple[tuple[AccountExport, ...], tuple[AccountImport, ...]]]:
    cfg = parse_config(text, "t.conf", env={})
    return {a.name: (a.exports, a.imports) for a in cfg.accounts}


def test_exports_and_imports_typed() -> None:
    accs = _accounts(OK)
    exports, _ = accs["A"]
    assert [(e.service, e.subject, e.accounts, e.response_type, e.response_threshold_ns)
            for e in exports] == [
        (False, "a.>", None, RESPONSE_SINGLETON, DEFAULT_RESPONSE_THRESHOLD_NS),
        (False, "r.>", ("B",), RESPONSE_SINGLETON, DEFAULT_RESPONSE_THRESHOLD_NS),
        (True, "svc.>", None, RESPONSE_SINGLETON, DEFAULT_RESPONSE_THRESHOLD_NS),
        (True, "many", None, RESPONSE_STREAM, 5_000_000_000),
        (True, "chunks", None, RESPONSE_CHUNKED, DEFAULT_RESPONSE_THRESHOLD_NS),
    ]
    _, imports = accs["B"]
    assert [(i.service, i.account, i.subject, i.local) for i in imports] == [
        (False, "A", "a.>", "p.a.>"),
        (False, "A", "r.*", "mine.*"),
        (True, "A", "svc.>", "local.svc.>"),
        (True, "A", "many", "many"),
    ]
    assert imports[0].pos is not None and imports[0].pos.line == 14


def test_empty_accounts_list_is_public() -> None:
    # nats-server reads `accounts: []` as no list at all.
    text = """accounts {
      A { exports [{stream: "x", accounts: []}] }
      B { imports [{stream: {account: A, subject: "x"}}] }
    }"""
    assert _accounts(text)["A"][0][0].accounts is None


def test_self_import_under_other_subject_is_valid() -> None:
    text = """accounts { A {
      exports [{stream: "ok.>"}, {service: "t.>"}]
      imports [{stream: {account: A, subject: "ok.>"}, prefix: "z"},
               {service: {account: A, subject: "t.>"}, to: "u.>"}]
    } }"""
    assert len(_accounts(text)["A"][1]) == 2


def _error(accounts: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(f"accounts {{\n{accounts}\n}}", "t.conf", env={})
    assert info.value.pos is not None
    return info.value.message


# (accounts block, nats-server's text)
ERRORS = [
    ('A { exports [{stream: "a.>"}] }\nB { imports [{stream: {account: A, subject: "b.>"}}] }',
     'Error adding stream import "b.>": stream import not authorized'),
    ('A { exports [{service: "s"}] }\nB { imports [{service: {account: A, subject: "t"}}] }',
     'Error adding service import "t": service import not authorized'),
    ('A { exports [{stream: "a.>", accounts: [C]}] }\n'
     'B { imports [{stream: {account: A, subject: "a.>"}}] }\nC {}',
     'Error adding stream import "a.>": stream import not authorized'),
    ('A { exports [{service: "s", accounts: [C]}] }\n'
     'B { imports [{service: {account: A, subject: "s"}}] }\nC {}',
     'Error adding service import "s": service import not authorized'),
    ('A { exports [{stream: "a.>", accounts: [Z]}] }', '"Z" account not defined for stream export'),
    ('A { exports [{service: "a", accounts: [Z]}] }', '"Z" account not defined for service export'),
    ('B { imports [{stream: {account: Q, subject: "a.>"}}] }',
     '"Q" account not defined for stream import'),
    ('B { imports [{service: {account: Q, subject: "a"}}] }',
     '"Q" account not defined for service import'),
    ('A { exports [{service: "x"}], imports [{service: {account: B, subject: "x"}}] }\n'
     'B { exports [{service: "x"}], imports [{service: {account: A, subject: "x"}}] }',
     'Error adding service import "x": import forms a cycle'),
    ('A { exports [{stream: "x.>"}], imports [{stream: {account: B, subject: "x.>"}}] }\n'
     'B { exports [{stream: "x.>"}], imports [{stream: {account: A, subject: "x.>"}}] }',
     'Error adding stream import "x.>": import forms a cycle'),
    ('A { exports [{stream: "ok.>"}] }\n'
     'B { imports [{stream: {account: A, subject: "ok.>"}, prefix: "p.*"}] }',
     'Error adding stream import "ok.>": stream import prefix can not contain wildcard tokens'),
    ('A { exports [{stream: "ok.>"}] }\nB { imports [{stream: {account: A, subject: "ok.>"}},'
     ' {stream: {account: A, subject: "ok.>"}, prefix: "z"}] }',
     'Error adding stream import "ok.>": stream import already exists'),
    ('A { exports [{service: "t.>"}] }\nB { imports [{service: {account: A, subject: "t.>"}},'
     ' {service: {account: A, subject: "t.>"}}] }',
     'Duplicate service import subject "t.>", previously used in import for account "A", '
     'subject "t.>"'),
    ('A { exports [{stream: "ok", response_type: stream}] }',
     "Detected response directive on non-service"),
    ('A { exports [{service: "t", response_type: bogus}] }', 'Unknown response type: "bogus"'),
    ('A { exports [{service: "t", response_threshold: "soon"}] }',
     'Expected response threshold to be a parseable time duration, got "soon"'),
    ('A { exports [{stream: "s", latency: "lat"}] }',
     "Detected latency directive on non-service"),
    ('A { exports [{stream: "ok"}] }\n'
     'B { imports [{stream: {account: A, subject: "ok"}, prefix: "p", to: "q"}] }',
     "Stream import can not have a 'prefix' and a 'to' property"),
    ('B { imports [{stream: {account: A}}] }\nA {}', "Expect an account name and a subject"),
    ('A { exports [{stream: "ok"}] }\n'
     'B { imports [{stream: {account: A, subject: "ok"}, bogus: 1}] }', 'unknown field "bogus"'),
    ('A { exports [{stream: "s", bogus: 1}] }', 'unknown field "bogus"'),
    ('A { exports: "s" }', "Exports should be an array, got string"),
    ('A { imports: {stream: "s"} }', "Imports should be an array, got map[string]interface {}"),
    ('A { exports: ["s"] }', "Export Items should be a map with type entry, got string"),
    ('A { exports: [{service: "s"}] }\nB { imports: [{service: {account: A, subject: "s"}},'
     ' {stream: {account: A, subject: "s"}}] }',
     'Error adding stream import "s": stream import not authorized'),
]


@pytest.mark.parametrize(("accounts", "text"), ERRORS)
def test_import_errors_as_nats_server(accounts: str, text: str) -> None:
    assert _error(accounts) == text


def test_bad_export_subject_refused() -> None:
    # nats-server takes it silently (it can never match); jetraft says so.
    assert _error('A { exports [{stream: "a..b"}] }') == (
        'Error adding stream export "a..b": invalid subject')


@pytest.mark.parametrize(
    ("accounts", "key"),
    [
        ('A { exports [{service: "s", latency: "lat"}] }', "latency"),
        ('A { exports [{service: "s", allow_trace: true}] }', "allow_trace"),
        ('A { exports [{service: "s", account_token_position: 2}] }', "account_token_position"),
        ('A { exports [{service: "s"}] }\n'
         'B { imports [{service: {account: A, subject: "s"}, share: true}] }', "share"),
        ('A { exports [{stream: "s"}] }\n'
         'B { imports [{stream: {account: A, subject: "s"}, allow_trace: true}] }', "allow_trace"),
        ("A { limits { max_connections: 1 } }", "limits"),
    ],
)
def test_unimplemented_sub_keys_refused(accounts: str, key: str) -> None:
    message = _error(accounts)
    assert message.startswith(f"{key!r} is not supported by jetraft")
    assert "refusing to start" in message


def test_false_share_and_trace_are_the_defaults() -> None:
    text = """accounts {
      A { exports [{service: "s", allow_trace: false}, {stream: "t"}] }
      B { imports [{service: {account: A, subject: "s"}, share: false},
                   {stream: {account: A, subject: "t"}, allow_trace: false}] }
    }"""
    assert len(_accounts(text)["B"][1]) == 2
