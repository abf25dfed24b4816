"""Connection flags, NATS_* variables and contexts (saved where the nats CLI saves them)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import Runner, make_runner
from tests.cli.support import SYS_PASSWORD, SYS_USER, Servers, free_port


def test_context_save_select_and_use(single: Servers, tmp_path: Path) -> None:
    home = tmp_path / "home"
    nowhere = f"nats://127.0.0.1:{free_port()}"
    # NATS_URL points nowhere: only the context knows the server.
    jr = make_runner(home, nowhere)
    saved = jr("context", "save", "local", "-s", single.urls, "--description", "the test server")
    assert saved.code == 0, saved.err
    path = home / "nats" / "context" / "local.json"
    body = json.loads(path.read_text())
    assert body["url"] == single.urls and body["description"] == "the test server"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    env_only = {"NATS_URL": ""}
    assert jr("context", "select", "local", env=env_only).code == 0
    assert (home / "nats" / "context.txt").read_text().strip() == "local"
    listed = jr("ctx", "ls", env=env_only)
    assert "local*" in listed.out and "the test server" in listed.out
    # The selected context is used when nothing else names a server ...
    via_context = jr("stream", "add", "CTXS", "--subjects", "ctxs", "--defaults", env=env_only)
    assert via_context.code == 0, via_context.err
    # ... NATS_URL beats it, and a flag beats NATS_URL.
    env_wins = jr("stream", "info", "CTXS")
    assert env_wins.code == 1 and "could not connect to nats://127.0.0.1:" in env_wins.err
    assert jr("stream", "info", "CTXS", "-s", single.urls).code == 0
    named = jr("stream", "info", "CTXS", "--context", "local", env=env_only)
    assert named.code == 0
    unknown = jr("stream", "ls", "--context", "nope")
    assert unknown.code == 1 and unknown.err.strip() == "jetraft: error: unknown context 'nope'"
    info = jr("context", "info", "local", "--json").json()
    assert info["url"] == single.urls
    assert jr("context", "rm", "local").code == 1  # selected: refused without --force
    assert jr("context", "rm", "local", "-f").code == 0
    assert not path.exists()


def test_a_context_saved_by_the_nats_cli_is_read(single: Servers, tmp_path: Path) -> None:
    home = tmp_path / "home"
    folder = home / "nats" / "context"
    folder.mkdir(parents=True)
    # The shape `nats context save` writes (extra keys included).
    (folder / "fromnats.json").write_text(
        json.dumps(
            {
                "description": "",
                "url": single.urls,
                "socks_proxy": "",
                "token": "",
                "user": "",
                "password": "",
                "creds": "",
                "nkey": "",
                "cert": "",
                "key": "",
                "ca": "",
                "nsc": "",
                "jetstream_domain": "",
                "jetstream_api_prefix": "",
                "jetstream_event_prefix": "",
                "inbox_prefix": "",
                "user_jwt": "",
                "color_scheme": "",
                "tls_first": False,
            }
        )
    )
    jr = make_runner(home, "")
    r = jr("stream", "ls", "--context", "fromnats", env={"NATS_URL": ""})
    assert r.code == 0, r.err


def test_credentials_flags_and_environment(single: Servers, tmp_path: Path) -> None:
    jr = make_runner(tmp_path / "home", single.urls)
    denied = jr("stream", "ls", "--user", "app", "--password", "wrong")
    assert denied.code == 1
    assert denied.err.strip().endswith(
        "authorization violation (check the user, password, token, creds or nkey)"
    )
    assert jr("stream", "ls", "--user", "app", "--password", "app").code == 0
    env = {"NATS_USER": "app", "NATS_PASSWORD": "app"}
    assert jr("stream", "ls", env=env).code == 0
    # The system user is not in a JetStream account: the API does not answer it.
    system = jr("stream", "ls", "--user", SYS_USER, "--password", SYS_PASSWORD)
    assert system.code == 1 and "jetraft: error:" in system.err and "Traceback" not in system.err


def test_global_flags_before_the_command(jr: Runner, single: Servers) -> None:
    r = jr("-s", single.urls, "--timeout", "2s", "stream", "ls", "-n")
    assert r.code == 0, r.err
    version = jr("--version")
    assert version.code == 0 and version.out.startswith("jetraft ")


def test_server_command_still_runs_servers(jr: Runner) -> None:
    # `jetraft server -c FILE` is the server; only the admin verbs after `server` are the CLI.
    r = jr("server", "-c", "/nonexistent/jetraft.conf")
    assert r.code == 1 and "configuration error" in r.err


def test_missing_permission_is_named(single: Servers, tmp_path: Path) -> None:
    jr = make_runner(tmp_path / "home", single.urls)
    creds = ["--user", "reader", "--password", "reader", "--timeout", "2s"]
    assert jr("stream", "ls", *creds).code == 0
    r = jr("stream", "add", "DENIED", "--subjects", "denied", "--defaults", *creds)
    assert r.code == 1
    assert r.err.strip() == (
        "jetraft: error: could not create stream DENIED: permission denied: "
        'this user may not publish to "$JS.API.STREAM.CREATE.DENIED"'
    )
