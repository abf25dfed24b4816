"""`jetraft stream ...` against one jetraft server, run as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.cli.conftest import Runner
from tests.cli.support import JETRAFT, Servers, cli_env, free_port


def add(jr: Runner, name: str, *extra: str) -> None:
    r = jr("stream", "add", name, "--subjects", f"{name.lower()}.>", "--defaults", *extra)
    assert r.code == 0, r.err


def publish(jr: Runner, subject: str, count: int, body: str = "hello {{Count}}") -> None:
    r = jr("pub", subject, body, "--count", str(count))
    assert r.code == 0, r.err


def test_add_prints_the_new_streams_info(jr: Runner) -> None:
    r = jr(
        "str",
        "add",
        "ORDERS",
        "--subjects",
        "orders.>",
        "--defaults",
        "--max-msgs",
        "1000",
        "--description",
        "all orders",
    )
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert re.fullmatch(
        r"Information for Stream ORDERS created \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d",
        lines[0],
    )
    assert "Configuration:" in lines and "State:" in lines
    assert re.search(r"^\s+Subjects: orders\.>$", r.out, re.M)
    assert re.search(r"^\s+Description: all orders$", r.out, re.M)
    assert re.search(r"^\s+Maximum Messages: 1,000$", r.out, re.M)
    assert re.search(r"^\s+Replicas: 1$", r.out, re.M)
    # Every label on the page ends on the same column, as the seeds' pages do.
    colons = {line.index(":") for line in lines if re.match(r"^\s+\S.*: ", line)}
    assert len(colons) == 1


def test_info_text_and_json(jr: Runner) -> None:
    add(jr, "INFOS")
    publish(jr, "infos.a", 3)
    text = jr("stream", "info", "INFOS")
    assert text.code == 0, text.err
    assert re.search(r"^\s+Messages: 3$", text.out, re.M)
    assert re.search(r"^\s+Last Sequence: 3 @ \d{4}-", text.out, re.M)
    state_only = jr("s", "info", "INFOS", "--state")
    assert state_only.out.startswith("State for Stream INFOS created ")
    assert "Configuration:" not in state_only.out
    info = jr("s", "i", "INFOS", "--json").json()
    assert info["config"]["name"] == "INFOS"
    assert info["config"]["subjects"] == ["infos.>"]
    assert info["state"]["messages"] == 3
    assert "type" not in info


def test_ls_names_json_and_empty_filter(jr: Runner) -> None:
    add(jr, "LSA")
    add(jr, "LSB")
    table = jr("stream", "ls")
    assert table.code == 0
    assert table.out.splitlines()[0] == "Streams"
    assert re.search(
        r"^Name\s+Description\s+Created\s+Messages\s+Size\s+Last Message$", table.out, re.M
    )
    assert re.search(r"^LSA\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+0\s+0 B\s+never$", table.out, re.M)
    names = jr("str", "ls", "--names").out.split()
    assert {"LSA", "LSB"} <= set(names) and names == sorted(names)
    assert {"LSA", "LSB"} <= set(jr("str", "ls", "-j").json())
    assert jr("str", "ls", "--subject", "lsb.x", "-n").out.split() == ["LSB"]


def test_edit_dry_run_then_force(jr: Runner) -> None:
    add(jr, "EDITS")
    dry = jr("stream", "edit", "EDITS", "--max-msgs", "50", "--dry-run")
    assert dry.code == 0, dry.err
    assert "- max_msgs: -1" in dry.out and "+ max_msgs: 50" in dry.out
    assert jr("s", "info", "EDITS", "-j").json()["config"]["max_msgs"] == -1
    done = jr("stream", "edit", "EDITS", "--max-msgs", "50", "--description", "edited", "-f")
    assert done.code == 0, done.err
    assert re.search(r"^\s+Maximum Messages: 50$", done.out, re.M)
    cfg = jr("s", "info", "EDITS", "-j").json()["config"]
    assert (cfg["max_msgs"], cfg["description"]) == (50, "edited")
    same = jr("stream", "edit", "EDITS", "--max-msgs", "50", "-f")
    assert same.code == 0 and "No difference" in same.out


def test_edit_asks_and_no_answer_changes_nothing(jr: Runner) -> None:
    add(jr, "ASKED")
    r = jr("stream", "edit", "ASKED", "--max-msgs", "7", stdin="n\n")
    assert r.code == 0
    assert jr("s", "info", "ASKED", "-j").json()["config"]["max_msgs"] == -1
    r = jr("stream", "edit", "ASKED", "--max-msgs", "7", stdin="y\n")
    assert r.code == 0, r.err
    assert jr("s", "info", "ASKED", "-j").json()["config"]["max_msgs"] == 7


def test_config_file_and_conflicting_create(jr: Runner, tmp_path: Path) -> None:
    conf = tmp_path / "stream.json"
    conf.write_text(
        json.dumps(
            {
                "name": "FROMFILE",
                "subjects": ["ff.*"],
                "max_msgs_per_subject": 5,
                "storage": "memory",
            }
        )
    )
    r = jr("stream", "add", "--config", str(conf))
    assert r.code == 0, r.err
    cfg = jr("s", "info", "FROMFILE", "-j").json()["config"]
    assert (cfg["subjects"], cfg["max_msgs_per_subject"], cfg["storage"]) == (["ff.*"], 5, "memory")
    clash = jr("stream", "add", "FROMFILE", "--subjects", "other.>", "--defaults")
    assert clash.code == 1
    assert clash.err.strip() == (
        "jetraft: error: could not create stream FROMFILE: "
        "stream name already in use with a different configuration (10058)"
    )


def test_purge_get_and_rmm(jr: Runner) -> None:
    add(jr, "MSGS")
    publish(jr, "msgs.a", 4)
    publish(jr, "msgs.b", 1, "last b")
    got = jr("stream", "get", "MSGS", "2")
    assert got.code == 0, got.err
    assert re.match(r"Item: MSGS#2 received .* on Subject msgs\.a\n", got.out)
    assert got.out.rstrip().endswith("hello 2")
    last = jr("stream", "get", "MSGS", "--last-for", "msgs.b", "-j").json()
    assert (last["seq"], last["subject"]) == (5, "msgs.b")
    assert jr("stream", "rmm", "MSGS", "2", "-f").code == 0
    gone = jr("stream", "get", "MSGS", "2")
    assert gone.code == 1 and gone.err.strip().endswith("no message found (10037)")
    purged = jr("stream", "purge", "MSGS", "-f", "--subject", "msgs.a")
    assert purged.code == 0, purged.err
    assert purged.out.startswith("Purged 3 messages from MSGS\n")
    assert re.search(r"^\s+Messages: 1$", purged.out, re.M)
    assert jr("stream", "purge", "MSGS", "-f", "-j").json()["state"]["messages"] == 0


def test_rm_asks_unless_forced(jr: Runner) -> None:
    add(jr, "GONE")
    no_answer = jr("stream", "rm", "GONE")
    assert no_answer.code == 1
    assert "no answer on stdin (or pass --force)" in no_answer.err
    assert jr("stream", "rm", "GONE", stdin="n\n").code == 0
    assert jr("s", "info", "GONE").code == 0
    assert jr("stream", "rm", "GONE", stdin="y\n").code == 0
    missing = jr("s", "info", "GONE")
    assert missing.code == 1
    assert (
        missing.err.strip()
        == "jetraft: error: could not load stream GONE: stream not found (10059)"
    )
    add(jr, "GONE2")
    assert jr("stream", "del", "GONE2", "-f").code == 0


def test_report_rows_and_json(jr: Runner) -> None:
    add(jr, "REPA")
    publish(jr, "repa.x", 2)
    r = jr("stream", "report")
    assert r.code == 0, r.err
    assert re.search(
        r"^Stream\s+Storage\s+Placement\s+Consumers\s+Messages\s+Bytes\s+Lost\s+Deleted\s+Replicas$",
        r.out,
        re.M,
    )
    assert re.search(r"^REPA\s+File\s+0\s+2\s+\d+ B\s+0\s+0\s+1$", r.out, re.M)
    rows = {row["name"]: row for row in jr("stream", "report", "--json").json()}
    assert rows["REPA"]["messages"] == 2 and rows["REPA"]["replicas"] == 1


def test_step_down_of_an_unclustered_stream_is_refused(jr: Runner) -> None:
    add(jr, "SOLO")
    r = jr("stream", "cluster", "step-down", "SOLO")
    assert r.code == 1
    assert r.err.strip() == 'jetraft: error: stream "SOLO" is not clustered'


def test_user_mistakes_are_one_line(jr: Runner) -> None:
    bad_flag = jr("stream", "add", "X", "--max-age", "forever", "--defaults")
    assert bad_flag.code == 2 and "Traceback" not in bad_flag.err
    assert "--max-age: invalid duration 'forever'" in bad_flag.err
    unknown = jr("stream", "info", "NOPE", "--bogus")
    assert unknown.code == 2 and len(unknown.err.strip().splitlines()) == 1
    assert unknown.err.startswith("jetraft: error: No such option '--bogus'")
    no_name = jr("stream", "info")
    assert no_name.code == 2 and no_name.err.strip() == "jetraft: error: a stream name is required"
    port = free_port()
    down = jr("stream", "ls", "-s", f"nats://127.0.0.1:{port}")
    assert down.code == 1
    assert (
        down.err.strip()
        == f"jetraft: error: could not connect to nats://127.0.0.1:{port}: connection refused"
    )
    timeout = jr("stream", "ls", "--timeout", "soon")
    assert timeout.code == 2 and "--timeout: invalid duration 'soon'" in timeout.err


def test_add_asks_on_a_terminal(jr: Runner, single: Servers, tmp_path: Path) -> None:
    import pexpect

    env = cli_env(tmp_path / "home", NATS_URL=single.urls, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")
    child = pexpect.spawn(
        JETRAFT,
        ["str", "add", "ASKED2", "--max-msgs", "9"],
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(24, 120),
    )
    answers = [
        ("Subjects", "\x15asked2.>\r"),  # Ctrl-U clears the suggested default first
        ("Storage", "\x15memory\r"),
        ("Replication", "\r"),
        ("Retention Policy", "\r"),
        ("Discard Policy", "\x15new\r"),
        ("Per Subject Messages Limit", "\r"),
        ("Total Stream Size", "\x151MB\r"),
        ("Message TTL", "\x151h\r"),
        ("Max Message Size", "\r"),
        ("Duplicate tracking time window", "\r"),
        ("Allow message Roll-ups", "y"),
        ("Allow message deletion", "n"),
        ("Allow purging subjects or the entire stream", "\r"),
    ]
    try:
        for question, keys in answers:
            child.expect(question)
            child.send(keys)
        child.expect("Information for Stream ASKED2 created")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    cfg = jr("s", "info", "ASKED2", "-j").json()["config"]
    assert cfg["subjects"] == ["asked2.>"] and cfg["storage"] == "memory"
    assert (cfg["discard"], cfg["max_bytes"], cfg["max_age"]) == ("new", 1024**2, 3600 * 10**9)
    assert cfg["max_msgs"] == 9  # given as a flag: not asked
    assert (cfg["allow_rollup_hdrs"], cfg["deny_delete"], cfg["deny_purge"]) == (True, True, False)
