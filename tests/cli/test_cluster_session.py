"""The seeds' administration session, command for command, on a 5-server cluster.

n1-c1..n5-c1 in cluster C1 (jetraft, or nats-server with JETRAFT_CLI_CLUSTER=nats): add
ORDERS with 3 replicas, see a leader and two current replicas, step the leader down, evict a
peer and watch its replacement catch up; then the system-account commands. The meta-group
peer removal runs last because it changes the cluster for good.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import pexpect
import pytest

from tests.cli.conftest import Runner
from tests.cli.support import JETRAFT, SYS_FLAGS, Servers, cli_env, leader_in, replicas_in

NODES = {f"n{i}-c1" for i in range(1, 6)}


def info_json(jc: Runner, stream: str) -> dict[str, Any]:
    r = jc("stream", "info", stream, "--json")
    assert r.code == 0, r.err
    body: dict[str, Any] = r.json()
    return body


def wait_info(
    jc: Runner, stream: str, what: str, cond: Any, timeout_s: float = 30
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        info = info_json(jc, stream)
        if cond(info):
            return info
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}; last info: {info.get('cluster')}")
        time.sleep(0.25)


def healthy(replicas: int) -> Any:
    def cond(info: dict[str, Any]) -> bool:
        cl = info.get("cluster") or {}
        peers = cl.get("replicas") or []
        return (
            bool(cl.get("leader"))
            and len(peers) == replicas - 1
            and all(p.get("current") for p in peers)
        )

    return cond


def test_seeds_session(jc: Runner) -> None:
    # $ nats str add ORDERS --replicas 3
    added = jc("str", "add", "ORDERS", "--replicas", "3", "--subjects", "orders.>", "--defaults")
    assert added.code == 0, added.err
    assert re.match(r"Information for Stream ORDERS created \S+\n", added.out)
    assert re.search(r"^\s+Replicas: 3$", added.out, re.M)
    assert re.search(r"^Cluster Information:\n\n\s+Name: C1\n\s+Leader: n\d-c1\n", added.out, re.M)
    # Every page shows the cluster: wait until both followers are current, then read the text.
    wait_info(jc, "ORDERS", "a leader and two current replicas", healthy(3))
    text = jc("stream", "info", "ORDERS").out
    leader, replicas = leader_in(text), replicas_in(text)
    assert leader in NODES
    assert len(replicas) == 2 and all(state == "current" for _, state in replicas)
    assert {name for name, _ in replicas} < NODES - {leader}
    assert re.search(r"^\s+Replica: n\d-c1, current, seen \d+\.\d\ds ago$", text, re.M)

    assert jc("pub", "orders.new", "order {{Count}}", "--count", "20").code == 0

    # $ nats stream cluster step-down ORDERS
    down = jc("stream", "cluster", "step-down", "ORDERS")
    assert down.code == 0, down.err
    assert re.search(
        rf'^\d\d:\d\d:\d\d Requesting leader step down of "{leader}" in a 3 peer RAFT group$',
        down.err,
        re.M,
    )
    new = re.search(r'^\d\d:\d\d:\d\d New leader elected "(n\d-c1)"$', down.err, re.M)
    assert new and new.group(1) != leader
    assert leader_in(down.out) == new.group(1)
    assert "Information for Stream ORDERS created" in down.out
    assert leader in {name for name, _ in replicas_in(down.out)}

    # $ nats s cluster peer-remove ORDERS, answering "Select a Peer" with a follower.
    wait_info(jc, "ORDERS", "a healthy group after the step-down", healthy(3))
    before = info_json(jc, "ORDERS")["cluster"]
    evicted = before["replicas"][0]["name"]
    removed = jc("s", "cluster", "peer-remove", "ORDERS", stdin=f"{evicted}\n")
    assert removed.code == 0, removed.err
    assert f"? Select a Peer {evicted}" in removed.err
    assert re.search(rf'^\d\d:\d\d:\d\d Removing peer "{evicted}"$', removed.err, re.M)
    assert re.search(rf'^\d\d:\d\d:\d\d Requested removal of peer "{evicted}"$', removed.err, re.M)

    # A new replica is picked and catches up (outdated until it has every message).
    def replaced(info: dict[str, Any]) -> bool:
        cl = info.get("cluster") or {}
        names = {cl.get("leader")} | {p.get("name") for p in cl.get("replicas") or []}
        return evicted not in names and healthy(3)(info)

    after = wait_info(jc, "ORDERS", f"a replacement for {evicted}", replaced, 60)
    peers = {after["cluster"]["leader"]} | {p["name"] for p in after["cluster"]["replicas"]}
    assert len(peers) == 3 and evicted not in peers
    text = jc("stream", "info", "ORDERS").out
    assert [state for _, state in replicas_in(text)] == ["current", "current"]
    assert re.search(r"^\s+Messages: 20$", text, re.M)


def test_peer_remove_by_flag_and_refusals(jc: Runner) -> None:
    assert (
        jc("str", "add", "EVICT", "--replicas", "3", "--subjects", "evict.>", "--defaults").code
        == 0
    )
    cl = wait_info(jc, "EVICT", "a healthy group", healthy(3))["cluster"]
    target = cl["replicas"][-1]["name"]
    r = jc("stream", "cluster", "pr", "EVICT", "--peer", target)
    assert r.code == 0, r.err
    assert f'Requested removal of peer "{target}"' in r.err
    wait_info(
        jc, "EVICT", "the replacement", lambda i: healthy(3)(i) and target not in str(i["cluster"])
    )
    members = info_json(jc, "EVICT")["cluster"]
    stranger = sorted(NODES - {members["leader"]} - {p["name"] for p in members["replicas"]})[0]
    bad = jc("stream", "cluster", "peer-remove", "EVICT", "--peer", stranger)
    assert bad.code == 1
    assert re.fullmatch(r"jetraft: error: .*\(\d+\)", bad.err.strip().splitlines()[-1])
    no_answer = jc("stream", "cluster", "peer-remove", "EVICT")
    assert no_answer.code == 1
    assert no_answer.err.strip().endswith("no answer on stdin (or pass --peer NAME)")


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pty")
def test_peer_remove_choice_on_a_terminal(jc: Runner, cluster: Servers, tmp_path: Any) -> None:
    assert jc("str", "add", "TTY", "--replicas", "3", "--subjects", "tty.>", "--defaults").code == 0
    cl = wait_info(jc, "TTY", "a healthy group", healthy(3))["cluster"]
    env = cli_env(tmp_path / "home", NATS_URL=cluster.urls, TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1")
    child = pexpect.spawn(
        JETRAFT,
        ["s", "cluster", "peer-remove", "TTY"],
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(24, 100),
    )
    try:
        child.expect("Select a Peer")
        child.send("\x1b[B")  # arrow down: the second peer in the list (the first replica)
        child.send("\r")
        child.expect(r'Removing peer "(n\d-c1)"')
        chosen = child.match.group(1)
        child.expect(r'Requested removal of peer "n\d-c1"')
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
    # The menu lists the leader first; one arrow down picks a follower.
    assert chosen != cl["leader"] and chosen in {p["name"] for p in cl["replicas"]}


def test_consumer_in_the_cluster(jc: Runner) -> None:
    assert (
        jc("str", "add", "WORK", "--replicas", "3", "--subjects", "work.>", "--defaults").code == 0
    )
    assert jc("pub", "work.x", "job {{Count}}", "--count", "3").code == 0
    added = jc("consumer", "add", "WORK", "DOER", "--pull", "--defaults")
    assert added.code == 0, added.err
    assert added.out.startswith("Information for Consumer WORK > DOER created ")
    assert "Cluster Information:" in added.out

    def settled() -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while True:
            info: dict[str, Any] = jc("consumer", "info", "WORK", "DOER", "-j").json()
            cl = info.get("cluster") or {}
            if (
                cl.get("leader")
                and len(cl.get("replicas") or []) == 2
                and all(p.get("current") for p in cl["replicas"])
            ):
                return info
            assert time.monotonic() < deadline, f"consumer group never settled: {cl}"
            time.sleep(0.25)

    old = settled()["cluster"]["leader"]
    down = jc("consumer", "cluster", "step-down", "WORK", "DOER")
    assert down.code == 0, down.err
    assert f'Requesting leader step down of "{old}" in a 3 peer RAFT group' in down.err
    new = re.search(r'New leader elected "(n\d-c1)"', down.err)
    assert new and new.group(1) != old
    got = jc("consumer", "next", "WORK", "DOER")
    assert got.code == 0, got.err
    assert "job 1" in got.out and "Acknowledged message" in got.out
    report = jc("consumer", "report", "WORK", "--json").json()
    assert report[0]["name"] == "DOER" and report[0]["leader"] == new.group(1)


def test_stream_report_shows_replicas_and_leader(jc: Runner) -> None:
    assert (
        jc("str", "add", "REP3", "--replicas", "3", "--subjects", "rep3.>", "--defaults").code == 0
    )
    info = wait_info(jc, "REP3", "a healthy group", healthy(3))
    rows = {r["name"]: r for r in jc("stream", "report", "--json").json()}
    assert rows["REP3"]["replicas"] == 3
    assert rows["REP3"]["leader"] == info["cluster"]["leader"]
    text = jc("stream", "report").out
    line = next(ln for ln in text.splitlines() if ln.startswith("REP3 "))
    assert f"{info['cluster']['leader']}*" in line


def test_server_ls_and_report_with_system_credentials(jc: Runner) -> None:
    ls = jc("server", "ls", *SYS_FLAGS)
    assert ls.code == 0, ls.err
    rows = [ln.split() for ln in ls.out.splitlines() if re.match(r"^n\d-c1\*? ", ln)]
    assert {r[0].rstrip("*") for r in rows} == NODES
    assert sum(r[0].endswith("*") for r in rows) == 1
    assert all(r[1] == "C1" and r[4] == "yes" for r in rows)
    listed = jc("server", "list", *SYS_FLAGS, "--json").json()
    assert {r["server"]["name"] for r in listed} == NODES

    report = jc("server", "report", "jetstream", *SYS_FLAGS)
    assert report.code == 0, report.err
    assert report.out.startswith("JetStream Summary")
    assert "RAFT Meta Group Information - Lead cluster: C1" in report.out
    meta_rows = re.findall(r"^(n\d-c1)\s+\S+\s+(yes)?\s*true\s+true", report.out, re.M)
    assert {name for name, _ in meta_rows} == NODES
    assert sum(1 for _, lead in meta_rows if lead) == 1
    per_server = jc("server", "report", "js", *SYS_FLAGS, "-j").json()
    assert {r["server"]["name"] for r in per_server} == NODES

    varz = jc("server", "request", "variables", *SYS_FLAGS).json()
    assert {r["server"]["name"] for r in varz} == NODES
    one = jc("server", "req", "jetstream", "--name", "n2-c1", *SYS_FLAGS).json()
    assert [r["server"]["name"] for r in one] == ["n2-c1"]
    ping = jc("server", "ping", *SYS_FLAGS)
    assert ping.code == 0 and {m for m in re.findall(r"^(n\d-c1)\s+rtt=", ping.out, re.M)} == NODES

    denied = jc("server", "ls")
    assert denied.code == 1
    assert denied.err.strip().startswith(
        "jetraft: error: no results received, ensure the account used has system privileges"
    )


def test_checks_for_monitoring(jc: Runner) -> None:
    assert jc("str", "add", "CHK", "--replicas", "3", "--subjects", "chk.>", "--defaults").code == 0
    wait_info(jc, "CHK", "a healthy group", healthy(3))
    ok = jc("server", "check", "stream", "--stream", "CHK", "--peer-expect", "3")
    assert ok.code == 0, ok.out + ok.err
    assert ok.out.startswith("OK Stream CHK")
    crit = jc("server", "check", "stream", "--stream", "CHK", "--peer-expect", "5")
    assert crit.code == 2 and crit.out.startswith("CRITICAL Stream CHK Crit:3 peers of 5")
    warn = jc(
        "server", "check", "stream", "--stream", "CHK", "--peer-expect", "3", "--msgs-warn", "1"
    )
    assert warn.code == 1 and warn.out.startswith("WARNING ")
    account = jc("server", "check", "jetstream", "--format", "json")
    assert account.code in (0, 2)
    assert account.json()["name"] == "JetStream"


def test_meta_step_down(jc: Runner) -> None:
    r = jc("server", "cluster", "step-down", *SYS_FLAGS)
    assert r.code == 0, r.err
    old = re.search(r'Requesting leader step down of "(n\d-c1)" in a 5 peer RAFT group', r.err)
    new = re.search(r'New leader elected "(n\d-c1)"', r.err)
    assert old and new and old.group(1) != new.group(1)


def test_meta_peer_remove_last(jc: Runner, cluster: Servers) -> None:
    # Stop n5-c1 for good, then remove it from the meta group (the seeds' "will never return").
    victim = cluster.nodes[-1]
    victim.stop()

    def offline() -> bool:
        report = jc("server", "report", "jetstream", *SYS_FLAGS, "-j")
        if report.code != 0:
            return False
        metas = [r["data"].get("meta_cluster") or {} for r in report.json()]
        lead = [m for m in metas if m.get("leader")]
        return any(
            p.get("name") == victim.name and p.get("offline")
            for m in lead
            for p in m.get("replicas") or []
        )

    deadline = time.monotonic() + 60
    while not offline():
        assert time.monotonic() < deadline, "n5-c1 never reported offline"
        time.sleep(0.5)
    r = jc("server", "raft", "peer-remove", victim.name, "-f", *SYS_FLAGS)
    assert r.code == 0, r.err
    assert f'Requested removal of peer "{victim.name}"' in r.err
    missing = jc("server", "raft", "peer-remove", "n9-c1", "-f", *SYS_FLAGS)
    assert (
        missing.code == 1
        and missing.err.strip() == "jetraft: error: did not find a replica named n9-c1"
    )
