"""nats-server style flags: parsing, and overriding what the config file says."""

from __future__ import annotations

from pathlib import Path

import pytest

from jetraft.config import (
    AuthorizationConfig,
    ConfigError,
    JetStreamConfig,
    Overrides,
    ServerConfig,
    TLSConfig,
    apply_overrides,
    build_config,
    parse_args,
    parse_cluster_url,
)

S = 1_000_000_000


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "server.conf"
    path.write_text(text)
    return str(path)


def test_no_flags() -> None:
    assert parse_args([]) == (None, Overrides())
    assert build_config([]) == ServerConfig()


@pytest.mark.parametrize(
    "argv",
    [
        ["-c", "f.conf", "-p", "5000", "-a", "127.0.0.1", "-n", "s1", "-m", "8222", "-js",
         "-sd", "/data", "-D", "-V"],
        ["--config", "f.conf", "--port", "5000", "--addr", "127.0.0.1", "--name", "s1",
         "--http_port", "8222", "--jetstream", "--store_dir", "/data", "--debug", "--trace"],
        ["-config=f.conf", "-port=5000", "-net=127.0.0.1", "-server_name=s1", "-http_port=8222",
         "-js=true", "-store_dir=/data", "-DV"],
        ["-c=f.conf", "-p=5000", "--net", "127.0.0.1", "--server_name", "s1", "-m=8222",
         "--js", "--sd", "/data", "-debug", "-trace=true"],
    ],
)
def test_flag_spellings_single_double_dash_and_equals(argv: list[str]) -> None:
    path, ov = parse_args(argv)
    assert path == Path("f.conf")
    assert ov == Overrides(
        port=5000, host="127.0.0.1", server_name="s1", http_port=8222, jetstream=True,
        store_dir="/data", debug=True, trace=True,
    )


def test_boolean_flags_accept_go_false() -> None:
    _, ov = parse_args(["-js=false", "-D=0", "--trace=F"])
    assert (ov.jetstream, ov.debug, ov.trace) == (False, False, False)
    with pytest.raises(ConfigError, match="invalid boolean value"):
        parse_args(["-js=maybe"])


def test_dv_and_vv_combinations() -> None:
    assert parse_args(["-DV"])[1] == Overrides(debug=True, trace=True)
    assert parse_args(["-VV"])[1] == Overrides(trace=True, trace_verbose=True)
    assert parse_args(["-DVV"])[1] == Overrides(debug=True, trace=True, trace_verbose=True)


def test_bad_flags_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="command line: unrecognized arguments: --nope"):
        parse_args(["--nope"])
    with pytest.raises(ConfigError, match="invalid int value"):
        parse_args(["-p", "abc"])
    with pytest.raises(ConfigError, match="expected one argument"):
        parse_args(["-p"])
    with pytest.raises(ConfigError):
        parse_args(["--por", "1"])  # no abbreviations, as Go's flag package


def test_flags_override_file_values(tmp_path: Path) -> None:
    conf = write(tmp_path, """
server_name: from-file
listen: 127.0.0.1:4999
http_port: 8222
debug: false
jetstream { store_dir: /file/store, max_mem: 1G }
cluster {
  name: C1
  listen: 127.0.0.1:6222
  authorization { user: r, password: p }
  routes: [nats://127.0.0.1:6223]
}
""")
    cfg = build_config([
        "-c", conf, "-p", "5000", "-n", "from-flag", "-m", "-1", "-D", "-sd", "/flag/store",
        "--cluster", "nats://127.0.0.1:7222", "--cluster_name", "C2",
        "--routes", "nats://127.0.0.1:7223, nats://127.0.0.1:7224",
    ])
    assert (cfg.server_name, cfg.host, cfg.port, cfg.http_port) == (
        "from-flag", "127.0.0.1", 5000, -1)
    assert cfg.debug is True
    assert cfg.jetstream == JetStreamConfig(store_dir="/flag/store", max_memory_store=10**9)
    c = cfg.cluster
    assert c is not None
    assert (c.name, c.host, c.port) == ("C2", "127.0.0.1", 7222)
    # nats-server: a --cluster URL without credentials clears the file's route credentials
    assert (c.user, c.password) == ("", "")
    assert c.routes == ("nats://127.0.0.1:7223", "nats://127.0.0.1:7224")
    assert cfg.config_file == conf


def test_flags_can_disable_what_the_file_enables(tmp_path: Path) -> None:
    conf = write(tmp_path, 'jetstream: enabled\ncluster { name: C, port: 6222 }\n'
                           'tls { cert_file: a, key_file: b }\nserver_name: x\n')
    cfg = build_config(["-c", conf, "-js=false", "--cluster", "", "--tls=false"])
    assert cfg.jetstream is None and cfg.cluster is None and cfg.tls is None
    assert build_config(["-c", conf, "--routes", ""]).cluster.routes == ()  # type: ignore[union-attr]


def test_js_flag_uses_a_disabled_blocks_settings(tmp_path: Path) -> None:
    conf = write(tmp_path, "jetstream { enabled: false, store_dir: /kept, max_file: 5G }\n")
    assert build_config(["-c", conf]).jetstream is None
    cfg = build_config(["-c", conf, "-js"])
    assert cfg.jetstream == JetStreamConfig(store_dir="/kept", max_file_store=5 * 10**9)


def test_store_dir_flag_alone_does_not_enable_jetstream() -> None:
    cfg = build_config(["-sd", "/x"])
    assert cfg.jetstream is None
    assert build_config(["-sd", "/x", "-js"]).jetstream == JetStreamConfig(store_dir="/x")


def test_routes_need_a_cluster() -> None:
    with pytest.raises(ConfigError, match="solicited routes require cluster capabilities"):
        build_config(["--routes", "nats://a:1"])
    with pytest.raises(ConfigError, match="error parsing route url"):
        build_config(["--cluster", "nats://127.0.0.1:6222", "--routes", "nats://a:port"])


def test_cluster_url_forms() -> None:
    assert parse_cluster_url("nats://127.0.0.1:6222") == ("127.0.0.1", 6222, "", "")
    assert parse_cluster_url("nats://u:p@0.0.0.0:-1") == ("0.0.0.0", -1, "u", "p")
    assert parse_cluster_url("127.0.0.1:6333") == ("127.0.0.1", 6333, "", "")
    assert parse_cluster_url("nats://[::1]:6222") == ("::1", 6222, "", "")
    with pytest.raises(ConfigError, match="has no port"):
        parse_cluster_url("nats://127.0.0.1")
    with pytest.raises(ConfigError, match="expected cluster password"):
        parse_cluster_url("nats://u@127.0.0.1:6222")


def test_auth_flags() -> None:
    cfg = build_config(["--user", "alice", "--pass", "secret"])
    assert cfg.authorization == AuthorizationConfig(user="alice", password="secret")
    assert build_config(["--auth", "tok"]).authorization == AuthorizationConfig(token="tok")
    with pytest.raises(ConfigError, match="cannot have a user/pass and token"):
        build_config(["--user", "a", "--auth", "t"])


def test_user_flag_conflicts_with_a_users_array(tmp_path: Path) -> None:
    conf = write(tmp_path, "authorization { users = [ {user: a, password: b} ] }\n")
    with pytest.raises(ConfigError, match="single user/pass and a users array"):
        build_config(["-c", conf, "--user", "x"])


def test_tls_flags_and_auth_timeout_follow_them() -> None:
    assert build_config([]).auth_timeout_ns == 2 * S
    cfg = build_config(["--tlscert", "s.pem", "--tlskey", "s.key", "--tlscacert", "ca.pem",
                        "--tlsverify"])
    assert cfg.tls == TLSConfig("s.pem", "s.key", "ca.pem", True)
    assert cfg.auth_timeout_ns == 3 * S  # TLS timeout (2 s) + 1 s, as nats-server
    with pytest.raises(ConfigError, match="certificate must be present"):
        build_config(["--tls"])
    with pytest.raises(ConfigError, match="private key must be present"):
        build_config(["--tls", "--tlscert", "s.pem"])


def test_flags_are_validated_like_the_file() -> None:
    with pytest.raises(ConfigError, match="server name cannot contain spaces"):
        build_config(["-n", "a b"])
    with pytest.raises(ConfigError, match="port 70000 is out of range"):
        build_config(["-p", "70000"])
    with pytest.raises(ConfigError, match="requires `server_name`"):
        build_config(["-js", "--cluster", "nats://127.0.0.1:6222"])
    cfg = build_config(["-js", "--cluster", "nats://127.0.0.1:6222", "-n", "a",
                        "--cluster_name", "C"])
    assert cfg.cluster is not None and cfg.jetstream is not None


def test_port_zero_flag_means_default_port() -> None:
    assert build_config(["-p", "0"]).port == 4222
    assert build_config(["-p", "-1"]).port == -1


def test_bad_config_file_error_carries_the_position(tmp_path: Path) -> None:
    conf = write(tmp_path, "listen: 127.0.0.1:4222\ncluster {\n  name: C1\n")
    with pytest.raises(ConfigError) as info:
        build_config(["-c", conf, "-p", "1"])
    assert str(info.value) == f"{conf}:4:1: expected '}}' to close block opened at 2:9"


def test_apply_overrides_keeps_file_warnings(tmp_path: Path) -> None:
    conf = write(tmp_path, "bogus: 1\n")
    cfg = build_config(["-c", conf, "-p", "5001"])
    assert cfg.warnings == (f"{conf}:1:1: unknown field 'bogus'",)
    again = apply_overrides(cfg, Overrides(port=5002))
    assert again.warnings == cfg.warnings and again.port == 5002


def test_help_exits_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args(["-h"])
    assert info.value.code == 0
    assert "-js" in capsys.readouterr().out
