"""Rendering of stream information: the seeds' ``Information for Stream ...`` page, lists and
reports. Pure functions of the server's JSON, so they are unit tested without servers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from jetraft.cli.render import Columns, Table
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

_STORAGE = {"file": "File", "memory": "Memory"}
_RETENTION = {"limits": "Limits", "interest": "Interest", "workqueue": "WorkQueue"}
_RESERVED_META = ("_nats.",)


def reference_time(info: dict[str, Any]) -> datetime:
    """The server's ``ts`` when present (ages are then the server's view), else now."""
    return parse_time(info.get("ts")) or datetime.now(UTC)


def _unlimited(value: int | None, fmt: Any = comma) -> str:
    if value is None or value < 0:
        return "unlimited"
    return str(fmt(value))


def replica_line(replica: dict[str, Any]) -> str:
    """``n4-c1, current, seen 0.07s ago`` (``outdated`` when not current, ``OFFLINE``,
    ``not seen``, ``N operations behind`` as they apply)."""
    parts = [str(replica.get("name", "?")), "current" if replica.get("current") else "outdated"]
    if replica.get("offline"):
        parts.append("OFFLINE")
    active = int(replica.get("active") or 0)
    if 0 < active < 2**63 - 1:
        parts.append(f"seen {human_duration_ns(active)} ago")
    else:
        parts.append("not seen")
    lag = int(replica.get("lag") or 0)
    if lag == 1:
        parts.append("1 operation behind")
    elif lag > 1:
        parts.append(f"{comma(lag)} operations behind")
    return ", ".join(parts)


def add_cluster_section(cols: Columns, cluster: dict[str, Any] | None) -> None:
    """Name, Leader and one Replica line per follower, as the seeds show (the RAFT group
    name is left to ``--json``)."""
    if not cluster or not cluster.get("name"):
        return
    cols.title("Cluster Information")
    cols.row("Name", cluster["name"])
    cols.row("Leader", cluster.get("leader") or "(none)")
    for replica in cluster.get("replicas") or []:
        cols.row("Replica", replica_line(replica))


def _source_text(src: dict[str, Any]) -> str:
    parts = [str(src.get("name", ""))]
    if src.get("opt_start_seq"):
        parts.append(f"Start Seq: {comma(src['opt_start_seq'])}")
    if src.get("opt_start_time"):
        parts.append(f"Start Time: {src['opt_start_time']}")
    if src.get("filter_subject"):
        parts.append(f"Subject: {src['filter_subject']}")
    external = src.get("external") or {}
    if external.get("api"):
        parts.append(f"API Prefix: {external['api']}")
    return ", ".join(parts)


def add_config_rows(cols: Columns, cfg: dict[str, Any]) -> None:
    cols.row_if_set("Description", cfg.get("description"))
    cols.row_if("Subjects", cfg.get("subjects") or [], bool(cfg.get("subjects")))
    cols.row("Replicas", int(cfg.get("num_replicas") or 1))
    cols.row_if("Sealed", True, bool(cfg.get("sealed")))
    cols.row("Storage", _STORAGE.get(str(cfg.get("storage")), str(cfg.get("storage"))))
    cols.row_if(
        "Compression", cfg.get("compression"), cfg.get("compression") not in (None, "", "none")
    )
    cols.row_if("First Sequence", int(cfg.get("first_seq") or 0), bool(cfg.get("first_seq")))
    placement = cfg.get("placement") or {}
    cols.row_if_set("Placement Cluster", placement.get("cluster"))
    cols.row_if("Placement Tags", placement.get("tags") or [], bool(placement.get("tags")))
    transform = cfg.get("subject_transform") or {}
    if transform.get("dest"):
        cols.row("Subject Transform", f"{transform.get('src') or '>'} to {transform['dest']}")
    repub = cfg.get("republish") or {}
    if repub.get("dest"):
        label = "Republishing Headers" if repub.get("headers_only") else "Republishing"
        cols.row(label, f"{repub.get('src') or '>'} to {repub['dest']}")
    cols.row("Retention", _RETENTION.get(str(cfg.get("retention")), str(cfg.get("retention"))))
    cols.row("Acknowledgments", not cfg.get("no_ack"))
    discard = (
        "New Per Subject"
        if cfg.get("discard_new_per_subject")
        else str(cfg.get("discard", "old")).title()
    )
    cols.row("Discard Policy", discard)
    cols.row("Duplicate Window", go_duration_ns(int(cfg.get("duplicate_window") or 0)))
    cols.row_if("Direct Get", True, bool(cfg.get("allow_direct")))
    cols.row_if("Mirror Direct Get", True, bool(cfg.get("mirror_direct")))
    cols.row("Allows Msg Delete", not cfg.get("deny_delete"))
    cols.row("Allows Purge", not cfg.get("deny_purge"))
    cols.row("Allows Per-Message TTL", bool(cfg.get("allow_msg_ttl")))
    cols.row("Allows Rollups", bool(cfg.get("allow_rollup_hdrs")))
    _add_limits(cols, cfg)
    if cfg.get("mirror"):
        cols.row("Mirror", _source_text(cfg["mirror"]))
    for i, src in enumerate(sorted(cfg.get("sources") or [], key=lambda s: str(s.get("name")))):
        cols.row("Sources" if i == 0 else "", _source_text(src))


def _add_limits(cols: Columns, cfg: dict[str, Any]) -> None:
    cols.row("Maximum Messages", _unlimited(cfg.get("max_msgs")))
    per_subject = int(cfg.get("max_msgs_per_subject") or -1)
    cols.row("Maximum Per Subject", _unlimited(per_subject if per_subject > 0 else -1))
    cols.row("Maximum Bytes", _unlimited(cfg.get("max_bytes"), ibytes))
    max_age = int(cfg.get("max_age") or 0)
    cols.row("Maximum Age", go_duration_ns(max_age) if max_age > 0 else "unlimited")
    cols.row("Maximum Message Size", _unlimited(cfg.get("max_msg_size"), ibytes))
    cols.row("Maximum Consumers", _unlimited(cfg.get("max_consumers")))
    limits = cfg.get("consumer_limits") or {}
    if limits.get("inactive_threshold"):
        cols.row(
            "Consumer Inactive Threshold", human_duration_ns(int(limits["inactive_threshold"]))
        )
    if limits.get("max_ack_pending"):
        cols.row("Consumer Max Ack Pending", int(limits["max_ack_pending"]))
    meta = {
        k: v for k, v in (cfg.get("metadata") or {}).items() if not k.startswith(_RESERVED_META)
    }
    if meta:
        cols.title("Metadata")
        for key in sorted(meta):
            cols.row(key, meta[key])


def _seq_row(cols: Columns, label: str, seq: int, when: str | None) -> None:
    stamp = parse_time(when)
    if stamp is None or stamp.timestamp() <= 0:
        cols.row(label, seq)
    else:
        cols.row(label, f"{comma(seq)} @ {local_stamp(stamp)}")


def add_state_rows(cols: Columns, state: dict[str, Any]) -> None:
    cols.title("State")
    cols.row("Messages", int(state.get("messages") or 0))
    cols.row("Bytes", ibytes(int(state.get("bytes") or 0)))
    lost = state.get("lost") or {}
    if lost.get("msgs"):
        cols.row(
            "Lost Messages", f"{comma(len(lost['msgs']))} ({ibytes(int(lost.get('bytes') or 0))})"
        )
    _seq_row(cols, "First Sequence", int(state.get("first_seq") or 0), state.get("first_ts"))
    _seq_row(cols, "Last Sequence", int(state.get("last_seq") or 0), state.get("last_ts"))
    deleted = len(state.get("deleted") or []) or int(state.get("num_deleted") or 0)
    cols.row_if("Deleted Messages", deleted, deleted > 0)
    cols.row("Active Consumers", int(state.get("consumer_count") or 0))
    subjects = int(state.get("num_subjects") or 0)
    cols.row_if("Number of Subjects", subjects, subjects > 0)


def stream_info_page(info: dict[str, Any], state_only: bool = False) -> Columns:
    cfg = info.get("config") or {}
    name = cfg.get("name", "?")
    created = parse_time(info.get("created"))
    when = local_rfc3339(created) if created else "(unknown)"
    kind = "State for" if state_only else "Information for"
    cols = Columns(f"{kind} Stream {name} created {when}")
    if not state_only:
        cols.title("Configuration")
        add_config_rows(cols, cfg)
    add_cluster_section(cols, info.get("cluster"))
    for label, src in (("Mirror Information", info.get("mirror")),):
        if src:
            cols.title(label)
            _source_state(cols, src)
    if info.get("sources"):
        cols.title("Source Information")
        for src in info["sources"]:
            _source_state(cols, src)
    add_state_rows(cols, info.get("state") or {})
    return cols


def _source_state(cols: Columns, src: dict[str, Any]) -> None:
    cols.row("Stream Name", src.get("name", ""))
    cols.row("Lag", int(src.get("lag") or 0))
    active = int(src.get("active") or 0)
    cols.row("Last Seen", human_duration_ns(active) if 0 < active < 2**63 - 1 else "never")
    error = src.get("error") or {}
    cols.row_if_set("Error", error.get("description"))


def peer_cell(cluster: dict[str, Any] | None) -> str:
    """``n1-c1*, n3-c1, n4-c1!``: the leader starred, replicas not current marked ``!``."""
    if not cluster:
        return ""
    names = []
    if cluster.get("leader"):
        names.append(f"{cluster['leader']}*")
    for r in cluster.get("replicas") or []:
        bad = r.get("offline") or not r.get("current")
        names.append(f"{r.get('name')}{'!' if bad else ''}")
    return ", ".join(sorted(names))


def last_message_age(info: dict[str, Any]) -> str:
    state = info.get("state") or {}
    last = parse_time(state.get("last_ts"))
    if not state.get("messages") or last is None or last.timestamp() <= 0:
        return "never"
    return human_duration_ns(since_ns(last, reference_time(info)))


def streams_table(infos: list[dict[str, Any]], title: str) -> Table:
    table = Table(title, ["Name", "Description", "Created", "Messages", "Size", "Last Message"])
    for info in sorted(infos, key=lambda i: int((i.get("state") or {}).get("bytes") or 0)):
        cfg, state = info.get("config") or {}, info.get("state") or {}
        created = parse_time(info.get("created"))
        table.add(
            cfg.get("name", ""),
            cfg.get("description", ""),
            local_stamp(created) if created else "",
            int(state.get("messages") or 0),
            ibytes(int(state.get("bytes") or 0)),
            last_message_age(info),
        )
    return table


def report_row(info: dict[str, Any]) -> dict[str, Any]:
    """One stream's report figures, also the ``--json`` form of ``stream report``."""
    cfg, state = info.get("config") or {}, info.get("state") or {}
    cluster = info.get("cluster") or {}
    lost = state.get("lost") or {}
    return {
        "name": cfg.get("name", ""),
        "storage": str(cfg.get("storage", "file")),
        "replicas": int(cfg.get("num_replicas") or 1),
        "leader": cluster.get("leader", ""),
        "peers": peer_cell(cluster if cluster.get("name") else None),
        "consumers": int(state.get("consumer_count") or 0),
        "messages": int(state.get("messages") or 0),
        "bytes": int(state.get("bytes") or 0),
        "lost_messages": len(lost.get("msgs") or []),
        "lost_bytes": int(lost.get("bytes") or 0),
        "deleted": len(state.get("deleted") or []) or int(state.get("num_deleted") or 0),
        "placement": cfg.get("placement") or {},
    }


def report_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(
        "Stream Report",
        [
            "Stream",
            "Storage",
            "Placement",
            "Consumers",
            "Messages",
            "Bytes",
            "Lost",
            "Deleted",
            "Replicas",
        ],
    )
    for r in rows:
        placement = r["placement"]
        where = " ".join(
            p
            for p in (
                f"cluster: {placement['cluster']}" if placement.get("cluster") else "",
                f"tags: {', '.join(placement['tags'])}" if placement.get("tags") else "",
            )
            if p
        )
        lost = (
            "0"
            if not r["lost_messages"]
            else f"{comma(r['lost_messages'])} ({ibytes(r['lost_bytes'])})"
        )
        table.add(
            r["name"],
            _STORAGE.get(r["storage"], r["storage"]),
            where,
            r["consumers"],
            r["messages"],
            ibytes(r["bytes"]),
            lost,
            r["deleted"],
            r["peers"] or str(r["replicas"]),
        )
    return table
