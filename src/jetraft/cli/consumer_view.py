"""Rendering of consumer information: the info page, the list and the report."""

from __future__ import annotations

from typing import Any

from jetraft.cli.render import Columns, Table
from jetraft.cli.stream_view import add_cluster_section, peer_cell, reference_time
from jetraft.cli.units import (
    comma,
    go_duration_ns,
    human_duration_ns,
    ibytes,
    local_rfc3339,
    local_stamp,
    parse_time,
    since_ns,
)


def _deliver_policy(cfg: dict[str, Any]) -> str:
    policy = str(cfg.get("deliver_policy") or "all")
    if policy == "by_start_sequence":
        return f"From Sequence {cfg.get('opt_start_seq', 0)}"
    if policy == "by_start_time":
        return f"Since {cfg.get('opt_start_time', '')}"
    return {"all": "All", "last": "Last", "new": "New", "last_per_subject": "Last Per Subject"}.get(
        policy, policy
    )


def _ack_policy(cfg: dict[str, Any]) -> str:
    return {"none": "None", "all": "All", "explicit": "Explicit"}.get(
        str(cfg.get("ack_policy")), "Explicit"
    )


def _config_rows(cols: Columns, cfg: dict[str, Any]) -> None:
    cols.title("Configuration")
    cols.row_if_set("Name", cfg.get("name"))
    durable = cfg.get("durable_name")
    cols.row_if("Durable Name", durable, bool(durable) and durable != cfg.get("name"))
    cols.row_if_set("Description", cfg.get("description"))
    if cfg.get("deliver_subject"):
        cols.row("Delivery Subject", cfg["deliver_subject"])
    else:
        cols.row("Pull Mode", True)
    if cfg.get("filter_subject"):
        cols.row("Filter Subject", cfg["filter_subject"])
    elif cfg.get("filter_subjects"):
        cols.row("Filter Subjects", cfg["filter_subjects"])
    cols.row("Deliver Policy", _deliver_policy(cfg))
    cols.row_if("Deliver Queue Group", cfg.get("deliver_group"), bool(cfg.get("deliver_group")))
    cols.row("Ack Policy", _ack_policy(cfg))
    if cfg.get("ack_policy") != "none":
        cols.row("Ack Wait", go_duration_ns(int(cfg.get("ack_wait") or 0)))
    cols.row("Replay Policy", str(cfg.get("replay_policy") or "instant").title())
    max_deliver = int(cfg.get("max_deliver") or -1)
    cols.row_if("Maximum Deliveries", max_deliver, max_deliver > 0)
    cols.row_if_set("Sampling Rate", cfg.get("sample_freq"))
    rate = int(cfg.get("rate_limit_bps") or 0)
    cols.row_if("Rate Limit", f"{ibytes(rate // 8)} / second", rate > 0)
    cols.row_if(
        "Max Ack Pending",
        int(cfg.get("max_ack_pending") or 0),
        int(cfg.get("max_ack_pending") or 0) > 0,
    )
    cols.row_if(
        "Max Waiting Pulls", int(cfg.get("max_waiting") or 0), int(cfg.get("max_waiting") or 0) > 0
    )
    heartbeat = int(cfg.get("idle_heartbeat") or 0)
    cols.row_if("Idle Heartbeat", go_duration_ns(heartbeat), heartbeat > 0)
    cols.row_if("Flow Control", bool(cfg.get("flow_control")), bool(cfg.get("deliver_subject")))
    cols.row_if("Headers Only", True, bool(cfg.get("headers_only")))
    inactive = int(cfg.get("inactive_threshold") or 0)
    cols.row_if(
        "Inactive Threshold",
        go_duration_ns(inactive),
        inactive > 0 and not cfg.get("deliver_subject"),
    )
    cols.row_if(
        "Max Pull Expire",
        go_duration_ns(int(cfg.get("max_expires") or 0)),
        bool(cfg.get("max_expires")),
    )
    cols.row_if("Max Pull Batch", int(cfg.get("max_batch") or 0), bool(cfg.get("max_batch")))
    cols.row_if("Max Pull MaxBytes", int(cfg.get("max_bytes") or 0), bool(cfg.get("max_bytes")))
    backoff = cfg.get("backoff") or []
    cols.row_if("Backoff", [go_duration_ns(int(b)) for b in backoff], bool(backoff))
    cols.row_if(
        "Replicas", int(cfg.get("num_replicas") or 0), int(cfg.get("num_replicas") or 0) > 0
    )
    cols.row_if("Memory Storage", True, bool(cfg.get("mem_storage")))


def _seq_pair(pair: dict[str, Any], ref: Any, label: str) -> str:
    text = (
        f"Consumer sequence: {comma(int(pair.get('consumer_seq') or 0))} "
        f"Stream sequence: {comma(int(pair.get('stream_seq') or 0))}"
    )
    last = parse_time(pair.get("last_active"))
    if last is not None:
        text += f" {label}: {human_duration_ns(since_ns(last, ref))} ago"
    return text


def consumer_info_page(info: dict[str, Any], state_only: bool = False) -> Columns:
    cfg = info.get("config") or {}
    created = parse_time(info.get("created"))
    when = local_rfc3339(created) if created else "(unknown)"
    kind = "State for" if state_only else "Information for"
    cols = Columns(f"{kind} Consumer {info.get('stream_name')} > {info.get('name')} created {when}")
    if not state_only:
        _config_rows(cols, cfg)
    add_cluster_section(cols, info.get("cluster"))
    ref = reference_time(info)
    cols.title("State")
    cols.row("Last Delivered Message", _seq_pair(info.get("delivered") or {}, ref, "Last delivery"))
    if cfg.get("ack_policy") != "none":
        cols.row("Acknowledgment Floor", _seq_pair(info.get("ack_floor") or {}, ref, "Last Ack"))
        pending, limit = int(info.get("num_ack_pending") or 0), int(cfg.get("max_ack_pending") or 0)
        cols.row(
            "Outstanding Acks",
            f"{comma(pending)} out of maximum {comma(limit)}" if limit > 0 else pending,
        )
        cols.row("Redelivered Messages", int(info.get("num_redelivered") or 0))
    cols.row("Unprocessed Messages", int(info.get("num_pending") or 0))
    if not cfg.get("deliver_subject"):
        waiting, limit = int(info.get("num_waiting") or 0), int(cfg.get("max_waiting") or 0)
        cols.row(
            "Waiting Pulls",
            f"{comma(waiting)} of maximum {comma(limit)}"
            if limit > 0
            else f"{comma(waiting)} of unlimited",
        )
    elif info.get("push_bound"):
        group = cfg.get("deliver_group")
        cols.row("Active Interest", f"Active using Queue Group {group}" if group else "Active")
    else:
        cols.row("Active Interest", "No interest")
    return cols


def consumers_table(infos: list[dict[str, Any]]) -> Table:
    table = Table(
        "Consumers",
        ["Name", "Description", "Created", "Ack Pending", "Unprocessed", "Last Delivery"],
    )
    for info in sorted(infos, key=lambda i: str(i.get("name"))):
        created = parse_time(info.get("created"))
        last = parse_time((info.get("delivered") or {}).get("last_active"))
        age = human_duration_ns(since_ns(last, reference_time(info))) if last else "never"
        table.add(
            info.get("name", ""),
            (info.get("config") or {}).get("description", ""),
            local_stamp(created) if created else "",
            int(info.get("num_ack_pending") or 0),
            int(info.get("num_pending") or 0),
            age,
        )
    return table


def report_row(info: dict[str, Any], stream_msgs: int) -> dict[str, Any]:
    cfg = info.get("config") or {}
    cluster = info.get("cluster") or {}
    return {
        "name": info.get("name", ""),
        "mode": "Push" if cfg.get("deliver_subject") else "Pull",
        "ack_policy": _ack_policy(cfg),
        "ack_wait_ns": int(cfg.get("ack_wait") or 0),
        "ack_pending": int(info.get("num_ack_pending") or 0),
        "redelivered": int(info.get("num_redelivered") or 0),
        "unprocessed": int(info.get("num_pending") or 0),
        "unprocessed_pct": min(100, int(int(info.get("num_pending") or 0) * 100 / stream_msgs))
        if stream_msgs
        else 0,
        "ack_floor": int((info.get("ack_floor") or {}).get("stream_seq") or 0),
        "leader": cluster.get("leader", ""),
        "peers": peer_cell(cluster if cluster.get("name") else None),
    }


def report_table(stream: str, rows: list[dict[str, Any]]) -> Table:
    table = Table(
        f"Consumer report for {stream} with {len(rows)} consumers",
        [
            "Consumer",
            "Mode",
            "Ack Policy",
            "Ack Wait",
            "Ack Pending",
            "Redelivered",
            "Unprocessed",
            "Ack Floor",
            "Cluster",
        ],
    )
    for r in rows:
        unprocessed = (
            f"{comma(r['unprocessed'])} / {r['unprocessed_pct']}%" if r["unprocessed"] else "0"
        )
        table.add(
            r["name"],
            r["mode"],
            r["ack_policy"],
            go_duration_ns(r["ack_wait_ns"]),
            r["ack_pending"],
            r["redelivered"],
            unprocessed,
            r["ack_floor"],
            r["peers"],
        )
    return table
