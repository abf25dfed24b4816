"""pub, sub, req, reply, consumer, kv, object and bench against one jetraft server."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from tests.cli.conftest import Runner
from tests.cli.support import JETRAFT, Servers, cli_env, end_process


def spawn(single: Servers, home: Path, *args: str) -> subprocess.Popen[bytes]:
    """A long-running CLI command (sub, reply, watch) in the background."""
    return subprocess.Popen(
        [JETRAFT, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(home, NATS_URL=single.urls),
    )


def wait_for_line(proc: subprocess.Popen[bytes], text: str, timeout_s: float = 20) -> None:
    """Reads the process's stderr until ``text`` shows (it has subscribed)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    seen = b""
    while text.encode() not in seen:
        assert time.monotonic() < deadline, f"never saw {text!r}: {seen!r}"
        line = proc.stderr.readline()
        assert line or proc.poll() is None, f"exited early: {seen!r}"
        seen += line


def finish(proc: subprocess.Popen[bytes], timeout_s: float = 20) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        end_process(proc)
    assert proc.returncode == 0
    return out.decode()


def test_pub_sub_with_templates_headers_and_queue(
    jr: Runner, single: Servers, tmp_path: Path
) -> None:
    sub = spawn(single, tmp_path, "sub", "greet.>", "--count", "3", "--queue", "q1")
    wait_for_line(sub, "Subscribing on greet.> in queue group q1")
    r = jr("pub", "greet.{{Count}}", "hi {{Count}}", "--count", "3", "-H", "Trace:abc")
    assert r.code == 0, r.err
    assert re.search(r'^\d\d:\d\d:\d\d Published 3 messages to "greet.\{\{Count\}\}"$', r.err, re.M)
    out = finish(sub)
    for i in (1, 2, 3):
        assert f'[#{i}] Received on "greet.{i}"\nTrace: abc\n\nhi {i}\n' in out


def test_pub_reads_stdin_and_reports_bytes(jr: Runner, single: Servers, tmp_path: Path) -> None:
    sub = spawn(single, tmp_path, "sub", "stdin.x", "--count", "1", "--raw")
    wait_for_line(sub, "Subscribing on stdin.x")
    r = jr("pub", "stdin.x", stdin="from stdin")
    assert r.code == 0 and 'Published 10 bytes to "stdin.x"' in r.err
    assert finish(sub) == "from stdin\n"


def test_request_reply(jr: Runner, single: Servers, tmp_path: Path) -> None:
    replier = spawn(
        single, tmp_path, "reply", "svc.echo", "got: {{Request}} #{{Count}}", "--count", "2"
    )
    wait_for_line(replier, 'Listening on "svc.echo" in group "NATS-RPLY-22"')
    first = jr("req", "svc.echo", "ping")
    assert first.code == 0, first.err
    assert first.out.strip() == "got: ping #1"
    assert re.search(r'Sending request on "svc.echo"', first.err)
    assert re.search(r"Received with rtt \d+\.\d+ms", first.err)
    raw = jr("request", "svc.echo", "pong", "--raw")
    assert raw.out == "got: pong #2\n"
    out = finish(replier)
    assert "ping" in out and "pong" in out
    nobody = jr("req", "svc.nobody", "x", "--timeout", "1s")
    assert nobody.code == 1
    assert (
        nobody.err.strip().splitlines()[-1]
        == 'jetraft: error: no responders are available for "svc.nobody"'
    )


def test_publish_to_jetstream(jr: Runner) -> None:
    assert jr("str", "add", "JSPUB", "--subjects", "jspub.>", "--defaults").code == 0
    r = jr("pub", "jspub.a", "x", "-J")
    assert r.code == 0, r.err
    assert r.out.strip() == ">>> Stream: JSPUB Sequence: 1"
    missing = jr("pub", "nostream.a", "x", "--jetstream")
    assert (
        missing.code == 1
        and missing.err.strip() == 'jetraft: error: no stream holds subject "nostream.a"'
    )


def test_consumer_lifecycle(jr: Runner) -> None:
    assert jr("str", "add", "CONS", "--subjects", "cons.>", "--defaults").code == 0
    assert jr("pub", "cons.{{Count}}", "m{{Count}}", "--count", "4").code == 0
    added = jr(
        "consumer",
        "add",
        "CONS",
        "PULLER",
        "--pull",
        "--filter",
        "cons.>",
        "--max-deliver",
        "5",
        "--defaults",
    )
    assert added.code == 0, added.err
    assert added.out.startswith("Information for Consumer CONS > PULLER created ")
    assert re.search(r"^\s+Pull Mode: true$", added.out, re.M)
    assert re.search(r"^\s+Filter Subject: cons\.>$", added.out, re.M)
    assert re.search(r"^\s+Ack Wait: 30s$", added.out, re.M)
    assert re.search(r"^\s+Unprocessed Messages: 4$", added.out, re.M)
    got = jr("con", "next", "CONS", "PULLER", "--count", "2")
    assert got.code == 0, got.err
    assert re.search(
        r"^\[\d\d:\d\d:\d\d\] subj: cons\.1 / tries: 1 / cons seq: 1 / str seq: 1 / pending: 3$",
        got.out,
        re.M,
    )
    assert "m2" in got.out and got.out.count("Acknowledged message") == 2
    info = jr("c", "info", "CONS", "PULLER", "-j").json()
    assert (info["num_pending"], info["ack_floor"]["stream_seq"]) == (2, 2)
    raw = jr("consumer", "next", "CONS", "PULLER", "--raw", "--no-ack")
    assert raw.out == "m3\n"
    assert jr("consumer", "ls", "CONS", "--names").out.split() == ["PULLER"]
    table = jr("consumer", "ls", "CONS").out
    assert re.search(r"^PULLER\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+1\s+1\s+\S+$", table, re.M)
    report = jr("consumer", "report", "CONS", "-j").json()
    assert (
        report[0]["name"] == "PULLER"
        and report[0]["mode"] == "Pull"
        and report[0]["ack_pending"] == 1
    )
    assert jr("consumer", "rm", "CONS", "PULLER", "-f").code == 0
    gone = jr("consumer", "info", "CONS", "PULLER")
    assert gone.code == 1
    assert (
        gone.err.strip()
        == "jetraft: error: could not load consumer CONS > PULLER: consumer not found (10014)"
    )


def test_consumer_push_and_bad_config(jr: Runner) -> None:
    assert jr("str", "add", "PUSHY", "--subjects", "pushy.>", "--defaults").code == 0
    push = jr(
        "consumer",
        "add",
        "PUSHY",
        "PUSHER",
        "--target",
        "out.pushy",
        "--deliver",
        "last",
        "--defaults",
        "--json",
    )
    assert push.code == 0, push.err
    cfg = push.json()["config"]
    assert (cfg["deliver_subject"], cfg["deliver_policy"]) == ("out.pushy", "last")
    # A push consumer cannot limit waiting pulls: nats-server's error and code come through.
    bad = jr(
        "consumer", "add", "PUSHY", "BAD", "--target", "out.bad", "--max-waiting", "5", "--defaults"
    )
    assert bad.code == 1
    assert re.fullmatch(
        r"jetraft: error: could not create consumer: .*max waiting.* \(10080\)", bad.err.strip()
    )
    not_clustered = jr("consumer", "cluster", "step-down", "PUSHY", "PUSHER")
    assert not_clustered.code == 1 and "is not clustered" in not_clustered.err


def test_kv(jr: Runner, single: Servers, tmp_path: Path) -> None:
    added = jr("kv", "add", "SETTINGS", "--history", "3")
    assert added.code == 0, added.err
    assert added.out.startswith("Information for Key-Value Store Bucket SETTINGS created ")
    assert re.search(r"^\s+History Kept: 3$", added.out, re.M)
    watcher = spawn(single, tmp_path, "kv", "watch", "SETTINGS", "--count", "3")
    wait_for_line(watcher, "Watching SETTINGS > >")
    assert jr("kv", "put", "SETTINGS", "color", "red").out == "red\n"
    assert jr("kv", "put", "SETTINGS", "color", stdin="blue").code == 0
    got = jr("kv", "get", "SETTINGS", "color")
    assert re.match(
        r"SETTINGS > color revision: 2 created @ \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\n\nblue\n", got.out
    )
    assert jr("kv", "get", "SETTINGS", "color", "--revision", "1", "--raw").out == "red\n"
    history = jr("kv", "history", "SETTINGS", "color", "-j").json()
    assert [(h["revision"], h["operation"], h["value"]) for h in history] == [
        (1, "PUT", "red"),
        (2, "PUT", "blue"),
    ]
    assert jr("kv", "ls", "SETTINGS").out.split() == ["color"]
    assert "SETTINGS" in jr("kv", "ls", "--names").out.split()
    assert jr("kv", "del", "SETTINGS", "color", "-f").code == 0
    deleted = jr("kv", "get", "SETTINGS", "color")
    assert deleted.code == 1 and "not found in bucket SETTINGS (deleted)" in deleted.err
    out = finish(watcher)
    assert re.search(
        r"PUT SETTINGS > color: red\n.*PUT SETTINGS > color: blue\n.*DEL SETTINGS > color\n",
        out,
        re.S,
    )
    missing = jr("kv", "get", "NOBUCKET", "k")
    assert missing.code == 1 and missing.err.strip() == "jetraft: error: bucket NOBUCKET not found"
    assert jr("kv", "del", "SETTINGS", "-f").code == 0
    assert jr("kv", "info", "SETTINGS").code == 1


def test_object_store(jr: Runner, tmp_path: Path) -> None:
    assert jr("object", "add", "BLOBS").code == 0
    src = tmp_path / "report.bin"
    src.write_bytes(bytes(range(256)) * 1000)
    put = jr("obj", "put", "BLOBS", str(src))
    assert put.code == 0, put.err
    assert put.out.startswith("Stored report.bin in bucket BLOBS: 250 KiB")
    listed = jr("object", "ls", "BLOBS", "--json").json()
    assert [(o["name"], o["size"]) for o in listed] == [("report.bin", 256_000)]
    dest = tmp_path / "copy.bin"
    got = jr("object", "get", "BLOBS", "report.bin", "-O", str(dest))
    assert got.code == 0, got.err
    assert dest.read_bytes() == src.read_bytes()
    again = jr("object", "get", "BLOBS", "report.bin", "-O", str(dest))
    assert again.code == 2 and "exists, pass --force" in again.err
    assert jr("object", "rm", "BLOBS", "report.bin", "-f").code == 0
    assert jr("object", "ls", "BLOBS").out.strip() == "No entries found"
    gone = jr("object", "get", "BLOBS", "report.bin", "-O", str(tmp_path / "x"))
    assert gone.code == 1 and "object report.bin not found in bucket BLOBS" in gone.err


def test_bench(jr: Runner, single: Servers, tmp_path: Path) -> None:
    sub = spawn(single, tmp_path, "bench", "sub", "bench.core", "--msgs", "2000", "--json")
    out = b""
    assert sub.stdout is not None
    while b"Waiting for" not in out:
        out += sub.stdout.readline()
    pub = jr(
        "bench", "pub", "bench.core", "--msgs", "2000", "--size", "64", "--clients", "2", "--json"
    )
    assert pub.code == 0, pub.err
    assert pub.json()["msgs"] == 2000 and pub.json()["msgs_per_sec"] > 0
    received = finish(sub)
    import json

    stats = json.loads(received)
    assert stats["msgs"] == 2000 and set(stats["latency_ms"]) >= {"p50", "p90", "p99"}
    js_pub = jr("bench", "js", "pub", "bench.js", "--create", "--msgs", "300", "--window", "8")
    assert js_pub.code == 0, js_pub.err
    assert re.match(
        r"JetStream Pub stats: [\d,]+ msgs/sec ~ [\d.,]+ MiB/sec \(300 msgs", js_pub.out
    )
    assert re.search(r"latency ms: min \S+ p50 \S+ p90 \S+ p99 \S+ max \S+", js_pub.out)
    consume = jr("bench", "js", "consume", "--msgs", "300", "--batch", "64", "-j")
    assert consume.code == 0, consume.err
    assert consume.json()["msgs"] == 300
    assert jr("s", "info", "benchstream", "-j").json()["state"]["messages"] == 300
