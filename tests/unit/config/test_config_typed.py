"""Tree -> ServerConfig: defaults, each section, validation errors and warnings."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from jetraft.config import (
    AccountJetStreamConfig,
    ConfigError,
    JetStreamConfig,
    Permissions,
    ResponsePermission,
    ServerConfig,
    SubjectPermission,
    TLSConfig,
    UserConfig,
    load_config,
    parse_config,
    parse_go_duration,
)

S = 1_000_000_000


def cfg_of(text: str) -> ServerConfig:
    return parse_config(text, "t.conf", env={})


def error_of(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "t.conf", env={})
    return info.value


def test_defaults_are_nats_server_defaults() -> None:
    cfg = cfg_of("")
    assert cfg == ServerConfig(config_file="t.conf")
    assert (cfg.host, cfg.port, cfg.http_port) == ("0.0.0.0", 4222, 0)
    assert cfg.max_payload == 1024 * 1024 and cfg.max_pending == 64 * 1024 * 1024
    assert cfg.max_control_line == 4096 and cfg.max_connections == 65536
    assert cfg.ping_interval_ns == 120 * S and cfg.ping_max == 2
    assert cfg.write_deadline_ns == 10 * S and cfg.auth_timeout_ns == 2 * S
    assert cfg.lame_duck_duration_ns == 120 * S and cfg.lame_duck_grace_period_ns == 10 * S
    assert cfg.system_account == "$SYS"
    assert cfg.jetstream is None and cfg.cluster is None and cfg.tls is None
    assert cfg.authorization is None and cfg.accounts == () and cfg.warnings == ()


@pytest.mark.parametrize(
    ("listen", "host", "port"),
    [
        ("4333", "0.0.0.0", 4333),
        ('"4333"', "0.0.0.0", 4333),
        (":4333", "0.0.0.0", 4333),
        ("127.0.0.1:4333", "127.0.0.1", 4333),
        ("localhost:4333", "localhost", 4333),
        ('"[::1]:4333"', "::1", 4333),
        ("127.0.0.1:-1", "127.0.0.1", -1),
        ("0", "0.0.0.0", 4222),
    ],
)
def test_listen_forms(listen: str, host: str, port: int) -> None:
    cfg = cfg_of(f"listen: {listen}")
    assert (cfg.host, cfg.port) == (host, port)


def test_host_port_and_http() -> None:
    cfg = cfg_of("host: 10.0.0.1\nport: 5000\nhttp: 127.0.0.1:8223\n")
    assert (cfg.host, cfg.port) == ("10.0.0.1", 5000)
    assert (cfg.http_host, cfg.http_port) == ("127.0.0.1", 8223)
    assert cfg_of("http_port: 8222").http_port == 8222
    assert cfg_of("monitor_port: -1").http_port == -1


@pytest.mark.parametrize(
    ("text", "line", "col", "fragment"),
    [
        ("listen: 70000", 1, 9, "port 70000 is out of range"),
        ("listen: localhost", 1, 9, "could not parse address string 'localhost'"),
        ("listen: a:b", 1, 9, "could not parse port 'b'"),
        ("port: true", 1, 7, "'port' must be an integer, got boolean true"),
        ("a = 1\nmax_payload: -5", 2, 14, "'max_payload' must be at least 0"),
        ("max_payload: 3GB", 1, 14, "must be at most 2147483647"),
        ("max_payload: lots", 1, 14, "must be a size"),
        ("ping_interval: \"2 minutes\"", 1, 16, "error parsing ping_interval"),
        ("write_deadline: \"-1s\"", 1, 17, "must not be negative"),
        ("server_name: \"my server\"", 1, 14, "server name cannot contain spaces"),
        ("server_name: 42", 1, 14, "must be a string, got integer 42 (quote it)"),
        ("debug: 1", 1, 8, "'debug' must be true or false"),
        ("server_tags: [a, 1]", 1, 18, "'server_tags element' must be a string"),
        ("cluster: 5", 1, 10, "'cluster' must be a block"),
        ("cluster { routes: [\"not a url\"] }", 1, 20, "error parsing route url"),
        ("cluster { name: \"C 1\" }", 1, 17, "cluster name cannot contain spaces"),
        ("jetstream: maybe", 1, 12, "expected 'enabled' or 'disabled'"),
        ("jetstream { max_mem: -5 }", 1, 22, "must be at least -1"),
        ("jetstream { domain: \"a.b\" }", 1, 21, "invalid jetstream.domain"),
        ("tls { cert_file: a }", 1, 5, "missing 'key_file'"),
        ("tls { cert_file: a, key_file: b, verify: 3 }", 1, 42, "must be true or false"),
    ],
)
def test_validation_errors_point_at_the_value(
    text: str, line: int, col: int, fragment: str
) -> None:
    err = error_of(text)
    assert fragment in err.message, str(err)
    assert (err.file, err.line, err.column) == ("t.conf", line, col), str(err)


def test_sizes_and_durations() -> None:
    cfg = cfg_of(
        'max_payload: 512KB\nmax_pending: "2M"\nmax_control_line: 8Ki\n'
        'ping_interval: "1m30s"\nwrite_deadline: 500ms\nlame_duck_duration: "45s"\n'
        "lame_duck_grace_period: 5s\n"
    )
    assert cfg.max_payload == 512 * 1024
    assert cfg.max_pending == 2 * 1024 * 1024  # strings read as nats-server's getStorageSize
    assert cfg.max_control_line == 8 * 1024
    assert cfg.ping_interval_ns == 90 * S and cfg.write_deadline_ns == S // 2
    assert cfg.lame_duck_duration_ns == 45 * S and cfg.lame_duck_grace_period_ns == 5 * S
    assert cfg.warnings == ()


def test_numeric_durations_are_seconds_with_a_warning() -> None:
    cfg = cfg_of("ping_interval: 30")
    assert cfg.ping_interval_ns == 30 * S
    assert cfg.warnings and cfg.warnings[0].startswith("t.conf:1:16: ping_interval should be")


def test_unquoted_minutes_are_minutes_with_a_warning() -> None:
    # nats-server would read a bare 2m as the number 2,000,000 (seconds!).
    cfg = cfg_of("ping_interval: 2m")
    assert cfg.ping_interval_ns == 120 * S
    assert "read as 2 minutes" in cfg.warnings[0]


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0", 0), ("1ns", 1), ("1us", 1000), ("1µs", 1000), ("1.5s", 1_500_000_000),
        ("1h30m", 5400 * S), ("-2s", -2 * S), ("+3ms", 3_000_000), (".5m", 30 * S),
        ("1m0.25s", 60 * S + 250_000_000),
    ],
)
def test_go_durations(text: str, ns: int) -> None:
    assert parse_go_duration(text) == ns


@pytest.mark.parametrize("text", ["", "5", "s", "1x", "1.s.", "--1s", "1 s"])
def test_bad_go_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_go_duration(text)


def test_keys_are_case_insensitive_like_nats_server() -> None:
    cfg = cfg_of("Server_Name: a\nLISTEN: 127.0.0.1:5000\nJetStream { Store_Dir: /x }")
    assert (cfg.server_name, cfg.port) == ("a", 5000)
    assert cfg.jetstream is not None and cfg.jetstream.store_dir == "/x"


def test_unknown_and_unsupported_keys_are_warnings_with_positions() -> None:
    cfg = cfg_of(
        "port: 4333\nbogus: 1\ncluster {\n  name: C, port: 6333\n  typo_key: 2\n}\n"
        "syslog: true\njetstream { wat: 1 }\nserver_name: n1\n"
    )
    assert cfg.port == 4333 and cfg.cluster is not None and cfg.cluster.port == 6333
    assert cfg.warnings == (
        "t.conf:2:1: unknown field 'bogus'",
        "t.conf:5:3: unknown field 'typo_key' in cluster",
        "t.conf:7:1: field 'syslog' is not supported by jetraft and is ignored",
        "t.conf:8:13: unknown field 'wat' in jetstream",
    )


def test_keys_used_as_variables_are_not_reported() -> None:
    cfg = cfg_of("MY_PORT = 4555\nUNUSED = 1\nport: $MY_PORT")
    assert cfg.port == 4555
    assert cfg.warnings == ("t.conf:2:1: unknown field 'UNUSED'",)


def test_authorization_single_user_and_token() -> None:
    cfg = cfg_of('authorization { user: alice, password: "s3cret", timeout: 0.5 }')
    assert cfg.authorization is not None
    assert (cfg.authorization.user, cfg.authorization.password) == ("alice", "s3cret")
    assert cfg.auth_timeout_ns == S // 2
    assert cfg_of('authorization { token: "t0k" }').authorization.token == "t0k"  # type: ignore[union-attr]
    err = error_of('authorization {\n user: a, token: "t"\n}')
    assert "cannot have a user/pass and token" in err.message and err.line == 1


def test_authorization_users_and_permission_forms() -> None:
    cfg = cfg_of(
        """
authorization {
  default_permissions: { subscribe: "public.>" }
  users = [
    { user: limited, password: p,
      permissions: {
        publish: { allow: ["orders.>", "_INBOX.>"], deny: ["orders.secret"] }
        subscribe: { allow: ["orders.*", "q.> workers"] }
      }
    }
    { user: svc, pass: p, permissions: { publish: "svc.out", subscribe: ["a", "b"],
                                         allow_responses: true } }
    { user: rr, password: p, permissions: { allow_responses: { max: 5, expires: "1m" } } }
    { user: plain, password: p }
  ]
}
"""
    )
    assert cfg.authorization is not None
    users = {u.user: u for u in cfg.authorization.users}
    assert users["limited"].permissions == Permissions(
        SubjectPermission(("orders.>", "_INBOX.>"), ("orders.secret",)),
        SubjectPermission(("orders.*", "q.> workers"), ()),
    )
    assert users["svc"] == UserConfig(
        "svc", "p",
        Permissions(SubjectPermission(("svc.out",)), SubjectPermission(("a", "b")),
                    ResponsePermission(1, 120 * S)),
    )
    assert users["rr"].permissions == Permissions(None, None, ResponsePermission(5, 60 * S))
    # default_permissions go to users without their own
    assert users["plain"].permissions == Permissions(None, SubjectPermission(("public.>",)))
    assert all(u.account == "" for u in users.values())


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{ user: a, permissions: { publsh: x } }", "unknown field 'publsh' in permissions"),
        ("{ user: a, permissions: { publish: { allw: [x] } } }", "only 'allow' or 'deny'"),
        ("{ user: a, permissions: { publish: \"a..b\" } }", "'a..b' is not a valid subject"),
        ("{ user: a, permissions: { publish: \"a b\" } }", "not a valid subject"),
        ("{ user: a, permissions: { publish: 5 } }", "must be a subject or an array"),
        ("{ user: a, permissions: { allow_responses: 3 } }", "must be a boolean or a block"),
        ("{ password: x }", "user entry requires a 'user'"),
        ("\"alice\"", "entries of 'authorization.users' must be blocks"),
    ],
)
def test_permission_and_user_errors(text: str, fragment: str) -> None:
    err = error_of(f"authorization {{\n  users = [\n    {text}\n  ]\n}}")
    assert fragment in err.message, str(err)
    assert err.line == 3


def test_duplicate_users_across_accounts_are_an_error() -> None:
    err = error_of(
        "accounts {\n  A { users = [{user: u, password: a}] }\n"
        "  B { users = [{user: u, password: b}] }\n}"
    )
    assert "duplicate user 'u' (first defined at t.conf:2:16)" in err.message
    assert (err.line, err.column) == (3, 16)


def test_accounts_users_and_jetstream() -> None:
    cfg = cfg_of(
        """
accounts {
  APP {
    jetstream: enabled
    users = [ {user: app, password: app} ]
  }
  LIMITED {
    jetstream { max_mem: 1G, max_file: "10G", max_streams: 5, max_bytes_required: true }
    users = [ {user: l, password: l} ]
  }
  OFF { jetstream: false }
}
no_auth_user: app
"""
    )
    app, limited, off = cfg.accounts
    assert (app.name, app.jetstream) == ("APP", AccountJetStreamConfig())
    assert app.users == (UserConfig("app", "app", None, "APP"),)
    assert limited.jetstream == AccountJetStreamConfig(
        max_memory=10**9, max_store=10 * 1024**3, max_streams=5, max_bytes_required=True
    )
    assert off.jetstream is None and off.users == ()
    assert cfg.no_auth_user == "app"
    assert [u.user for u in cfg.all_users()] == ["app", "l"]


def test_accounts_as_a_list_of_names() -> None:
    cfg = cfg_of("accounts: [A, B]")
    assert [a.name for a in cfg.accounts] == ["A", "B"]
    assert "reserved account" in error_of('accounts: [A, "$G"]').message
    assert "reserved account" in error_of("accounts { $G { } }").message


def test_no_auth_user_must_exist() -> None:
    err = error_of("accounts { A { users = [{user: a, password: a}] } }\nno_auth_user: b")
    assert "no_auth_user: 'b' not present" in err.message
    assert (err.line, err.column) == (2, 15)
    assert "users are not defined" in error_of("no_auth_user: b").message


def test_authorization_user_conflicts_with_account_users() -> None:
    err = error_of(
        "authorization { user: x, password: y }\n"
        "accounts { A { users = [{user: a, password: a}] } }"
    )
    assert "can not have a single user/pass and accounts" in err.message


def test_system_account_settings() -> None:
    assert cfg_of("system_account: ADMIN\naccounts { ADMIN {} }").system_account == "ADMIN"
    assert cfg_of("no_system_account: true").system_account == ""
    err = error_of("jetstream: true\naccounts { $SYS { jetstream: enabled } }")
    assert "system account" in err.message


def test_tls_block_and_auth_timeout_rule() -> None:
    cfg = cfg_of(
        'tls { cert_file: "s.pem", key_file: "s.key", ca_file: "ca.pem", verify: true, '
        "timeout: 3, handshake_first: true }"
    )
    assert cfg.tls == TLSConfig("s.pem", "s.key", "ca.pem", True, 3.0, True)
    # nats-server: with TLS and no explicit auth timeout, auth timeout = TLS timeout + 1 s.
    assert cfg.auth_timeout_ns == 4 * S
    cfg = cfg_of('tls { cert_file: a, key_file: b, timeout: "500ms" }')
    assert cfg.tls is not None and cfg.tls.timeout_s == 0.5
    assert cfg_of("tls { cert_file: a, key_file: b }").tls.timeout_s == 2.0  # type: ignore[union-attr]


def test_jetstream_forms() -> None:
    assert cfg_of("jetstream: true").jetstream == JetStreamConfig()
    assert cfg_of("jetstream: enabled").jetstream == JetStreamConfig()
    assert cfg_of("jetstream: disabled").jetstream is None
    assert cfg_of("jetstream: false").jetstream is None
    assert cfg_of("jetstream {}").jetstream == JetStreamConfig()
    assert JetStreamConfig().store_dir == os.path.join(tempfile.gettempdir(), "nats", "jetstream")
    cfg = cfg_of(
        "jetstream {\n  store_dir: \"/data/js\"\n  max_memory_store: 1GB\n"
        "  max_file_store: 10G\n  domain: hub\n  unique_tag: \" AZ \"\n"
        "  sync_interval: \"2m\"\n  max_buffered_msgs: 100\n}"
    )
    assert cfg.jetstream == JetStreamConfig(
        store_dir="/data/js", max_memory_store=1024**3, max_file_store=10 * 10**9,
        domain="hub", unique_tag="az", sync_interval_ns=120 * S, max_buffered_msgs=100,
    )
    assert cfg_of("jetstream { sync_interval: always }").jetstream.sync_interval_ns == 0  # type: ignore[union-attr]


def test_disabled_jetstream_block_keeps_its_settings() -> None:
    cfg = cfg_of("jetstream { enabled: false, store_dir: /keep }")
    assert cfg.jetstream is None
    assert cfg.jetstream_settings is not None and cfg.jetstream_settings.store_dir == "/keep"


def test_top_level_store_dir() -> None:
    cfg = cfg_of("store_dir: /top\njetstream: enabled")
    assert cfg.jetstream is not None and cfg.jetstream.store_dir == "/top"
    err = error_of("store_dir: /a\njetstream { store_dir: /b }")
    assert "duplicate 'store_dir'" in err.message and err.line == 2


def test_cluster_block() -> None:
    cfg = cfg_of(
        """
server_name: n1
jetstream: true
cluster {
  name: C1
  listen: 127.0.0.1:6333
  authorization { user: route, password: pw, timeout: 2 }
  routes = [ nats://route:pw@127.0.0.1:6334, "nats://127.0.0.1:6335" ]
  no_advertise: true
  connect_retries: 30
  pool_size: -1
  compression: off
}
"""
    )
    c = cfg.cluster
    assert c is not None
    assert (c.name, c.host, c.port) == ("C1", "127.0.0.1", 6333)
    assert (c.user, c.password, c.auth_timeout_s) == ("route", "pw", 2.0)
    assert c.routes == ("nats://route:pw@127.0.0.1:6334", "nats://127.0.0.1:6335")
    assert (c.no_advertise, c.connect_retries, c.pool_size) == (True, 30, -1)
    assert any("'compression' is not supported" in w for w in cfg.warnings)


def test_cluster_defaults_and_host_port_keys() -> None:
    c = cfg_of("cluster { name: X }").cluster
    assert c is not None and (c.host, c.port, c.routes) == ("0.0.0.0", 6222, ())
    c = cfg_of("cluster { host: 10.1.1.1, port: 7000, routes: nats://a:1 }").cluster
    assert c is not None and (c.host, c.port, c.routes) == ("10.1.1.1", 7000, ("nats://a:1",))


def test_duplicate_routes_warn() -> None:
    cfg = cfg_of("cluster { routes: [nats://a:1, nats://a:1] }")
    assert cfg.cluster is not None and cfg.cluster.routes == ("nats://a:1",)
    assert "duplicate route entry" in cfg.warnings[0]


def test_cluster_authorization_restrictions() -> None:
    assert "does not allow multiple users" in error_of(
        "cluster { authorization { users = [] } }").message
    assert "does not support tokens" in error_of(
        "cluster { authorization { token: x } }").message


def test_jetstream_cluster_needs_names() -> None:
    assert "requires `server_name`" in error_of("jetstream: true\ncluster { name: C }").message
    assert "requires `cluster.name`" in error_of(
        "server_name: a\njetstream: true\ncluster { port: 6222 }").message


def test_lame_duck_rules() -> None:
    err = error_of('lame_duck_duration: "10s"\nlame_duck_grace_period: "10s"')
    assert "strictly lower" in err.message and err.line == 2
    cfg = cfg_of('lame_duck_duration: "2s"\nlame_duck_grace_period: "1s"')
    assert cfg.lame_duck_duration_ns == 2 * S
    assert any("below nats-server's minimum of 30s" in w for w in cfg.warnings)


def test_max_connections_zero_means_refuse_all_like_nats_server() -> None:
    assert cfg_of("max_connections: 0").max_connections == -1
    assert cfg_of("max_conn: 10").max_connections == 10


def test_misc_scalars() -> None:
    cfg = cfg_of(
        "debug: true\ntrace: yes\nlogtime: false\nserver_tags: [\"az:1\", ssd]\n"
        "client_advertise: \"ext:4222\"\npid_file: /run/x.pid\nlog_file: /var/x.log\n"
        "max_subs: 100\nping_max: 5\ntrace_verbose: true\n"
    )
    assert (cfg.debug, cfg.trace, cfg.logtime, cfg.trace_verbose) == (True, True, False, True)
    assert cfg.server_tags == ("az:1", "ssd")
    assert (cfg.client_advertise, cfg.pid_file, cfg.log_file) == (
        "ext:4222", "/run/x.pid", "/var/x.log")
    assert (cfg.max_subscriptions, cfg.ping_max) == (100, 5)
    assert cfg_of('server_tags: "one"').server_tags == ("one",)


def test_max_payload_above_max_pending_only_warns() -> None:
    cfg = cfg_of("max_pending: 65536")
    assert cfg.max_pending == 65536
    assert any("higher than max_pending" in w for w in cfg.warnings)


def test_raw_tree_is_kept_and_excluded_from_equality() -> None:
    a, b = cfg_of("port: 1\n"), cfg_of("port: 1 # same\nX_UNUSED_VAR = 2\n")
    assert a.raw == {"port": 1} and b.raw == {"port": 1, "X_UNUSED_VAR": 2}
    assert a == b  # raw and warnings do not take part in equality


def test_load_config_reads_files_and_reports_missing_ones(tmp_path: Path) -> None:
    (tmp_path / "inc.conf").write_text("max_payload: 2KB\n")
    (tmp_path / "main.conf").write_text("port: 4999\ninclude inc.conf\n")
    cfg = load_config(tmp_path / "main.conf")
    assert (cfg.port, cfg.max_payload, cfg.config_file) == (4999, 2048, str(tmp_path / "main.conf"))
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "missing.conf")
    assert str(info.value) == f"{tmp_path / 'missing.conf'}: no such file"


def test_error_message_format_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.conf"
    path.write_text("listen: 4222\njetstream {\n  store_dir: /x\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}:4:1: expected '}}' to close block opened at 2:11"
