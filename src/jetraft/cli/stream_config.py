"""Stream configuration from flags, a JSON file and (on a terminal) questions.

One flag per StreamConfig field, named as the nats CLI names them. ``stream add`` asks for
the values the nats CLI asks for when they are not given and stdin is a terminal;
``--defaults`` (or stdin not being a terminal) takes the defaults instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from jetraft.cli import prompts
from jetraft.cli.errors import CliError
from jetraft.cli.units import parse_duration_ns, parse_size

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Flag:
    decls: tuple[str, ...]
    dest: str
    kind: str  # str | list | int | size | duration | bool | choice | map
    help: str
    choices: tuple[str, ...] = ()


STREAM_FLAGS: tuple[Flag, ...] = (
    Flag(
        ("--subjects",),
        "subjects",
        "list",
        "Subjects consumed by the stream (repeat or comma separate)",
    ),
    Flag(("--description",), "description", "str", "A description of the stream"),
    Flag(("--storage",), "storage", "choice", "Storage backend", ("file", "f", "memory", "m")),
    Flag(
        ("--compression",),
        "compression",
        "choice",
        "Compression (file storage only)",
        ("none", "s2"),
    ),
    Flag(("--replicas",), "replicas", "int", "How many replicas of the data to keep in a cluster"),
    Flag(("--tag",), "tags", "list", "Place the stream on servers with this tag (repeat)"),
    Flag(("--cluster",), "cluster", "str", "Place the stream in this cluster"),
    Flag(("--ack/--no-ack",), "ack", "bool", "Acknowledge publishes"),
    Flag(
        ("--retention",),
        "retention",
        "choice",
        "Retention policy",
        ("limits", "interest", "workq", "work"),
    ),
    Flag(("--discard",), "discard", "choice", "Discard policy", ("new", "old")),
    Flag(
        ("--discard-per-subject/--no-discard-per-subject",),
        "discard_per_subject",
        "bool",
        "Discard new messages per subject (implies --discard new)",
    ),
    Flag(("--first-sequence",), "first_sequence", "int", "The first sequence of the stream"),
    Flag(("--max-age",), "max_age", "duration", "Maximum age of messages (e.g. 1d, 1h30m)"),
    Flag(("--max-bytes",), "max_bytes", "size", "Maximum bytes to keep (e.g. 1GB, -1)"),
    Flag(("--max-consumers",), "max_consumers", "int", "Maximum number of consumers"),
    Flag(("--max-msg-size",), "max_msg_size", "size", "Maximum size of one message"),
    Flag(("--max-msgs",), "max_msgs", "int", "Maximum number of messages to keep"),
    Flag(
        ("--max-msgs-per-subject",), "max_msgs_per_subject", "int", "Maximum messages per subject"
    ),
    Flag(("--dupe-window",), "dupe_window", "duration", "Duplicate tracking window (e.g. 2m)"),
    Flag(("--mirror",), "mirror", "str", "Mirror another stream"),
    Flag(("--source",), "sources", "list", "Source data from another stream (repeat)"),
    Flag(("--allow-rollup/--no-allow-rollup",), "allow_rollup", "bool", "Allow roll-up headers"),
    Flag(("--deny-delete/--no-deny-delete",), "deny_delete", "bool", "Deny deleting messages"),
    Flag(("--deny-purge/--no-deny-purge",), "deny_purge", "bool", "Deny purging the stream"),
    Flag(("--allow-direct/--no-allow-direct",), "allow_direct", "bool", "Allow direct get"),
    Flag(
        ("--allow-mirror-direct/--no-allow-mirror-direct",),
        "allow_mirror_direct",
        "bool",
        "Allow direct get on mirrors",
    ),
    Flag(("--allow-msg-ttl/--no-allow-msg-ttl",), "allow_msg_ttl", "bool", "Allow per-message TTL"),
    Flag(
        ("--subject-del-markers-ttl",),
        "subject_del_markers_ttl",
        "duration",
        "How long subject delete markers stay",
    ),
    Flag(
        ("--allow-counter/--no-allow-counter",),
        "allow_counter",
        "bool",
        "Distributed counter stream",
    ),
    Flag(("--allow-batch/--no-allow-batch",), "allow_batch", "bool", "Allow atomic batch publish"),
    Flag(("--allow-schedules/--no-allow-schedules",), "allow_schedules", "bool", "Allow schedules"),
    Flag(("--transform-source",), "transform_source", "str", "Subject transform source"),
    Flag(
        ("--transform-destination",),
        "transform_destination",
        "str",
        "Subject transform destination",
    ),
    Flag(("--republish-source",), "republish_source", "str", "Republish messages matching this"),
    Flag(("--republish-destination",), "republish_destination", "str", "Republish destination"),
    Flag(
        ("--republish-headers/--no-republish-headers",),
        "republish_headers",
        "bool",
        "Republish only headers",
    ),
    Flag(
        ("--limit-consumer-inactive",),
        "limit_consumer_inactive",
        "duration",
        "Largest consumer inactive threshold allowed",
    ),
    Flag(
        ("--limit-consumer-max-pending",),
        "limit_consumer_max_pending",
        "int",
        "Largest consumer max ack pending allowed",
    ),
    Flag(("--persist-mode",), "persist_mode", "choice", "Persistence mode", ("default", "async")),
    Flag(("--metadata",), "metadata", "map", "Metadata as KEY=VALUE (repeat)"),
)
FLAG_DESTS = {f.dest for f in STREAM_FLAGS}


def stream_flags(fn: F) -> F:
    for f in reversed(STREAM_FLAGS):
        if f.kind == "bool":
            fn = click.option(*f.decls, f.dest, default=None, help=f.help)(fn)
        elif f.kind in ("list", "map"):
            fn = click.option(*f.decls, f.dest, multiple=True, help=f.help)(fn)
        elif f.kind == "choice":
            fn = click.option(
                *f.decls, f.dest, type=click.Choice(f.choices), default=None, help=f.help
            )(fn)
        elif f.kind == "int":
            fn = click.option(*f.decls, f.dest, type=int, default=None, help=f.help)(fn)
        else:
            fn = click.option(*f.decls, f.dest, default=None, help=f.help, metavar="VALUE")(fn)
    return fn


def given(values: dict[str, Any]) -> dict[str, Any]:
    """The stream flags the user actually gave."""
    out = {}
    for f in STREAM_FLAGS:
        value = values.get(f.dest)
        if value is None or (f.kind in ("list", "map") and not value):
            continue
        out[f.dest] = value
    return out


def _split(values: tuple[str, ...] | list[str]) -> list[str]:
    return [part.strip() for v in values for part in str(v).split(",") if part.strip()]


def _parse(kind: str, dest: str, value: Any) -> Any:
    try:
        if kind == "size":
            return parse_size(str(value))
        if kind == "duration":
            return parse_duration_ns(str(value))
    except ValueError as exc:
        raise CliError(f"--{dest.replace('_', '-')}: {exc}", 2) from None
    return value


def apply(cfg: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with every given flag applied (a new dict)."""
    out: dict[str, Any] = json.loads(json.dumps(cfg))
    kinds = {f.dest: f.kind for f in STREAM_FLAGS}
    v = {k: _parse(kinds[k], k, val) for k, val in flags.items()}
    simple = {
        "description": "description",
        "replicas": "num_replicas",
        "first_sequence": "first_seq",
        "max_age": "max_age",
        "max_bytes": "max_bytes",
        "max_consumers": "max_consumers",
        "max_msg_size": "max_msg_size",
        "max_msgs": "max_msgs",
        "max_msgs_per_subject": "max_msgs_per_subject",
        "dupe_window": "duplicate_window",
        "allow_rollup": "allow_rollup_hdrs",
        "deny_delete": "deny_delete",
        "deny_purge": "deny_purge",
        "allow_direct": "allow_direct",
        "allow_mirror_direct": "mirror_direct",
        "allow_msg_ttl": "allow_msg_ttl",
        "subject_del_markers_ttl": "subject_delete_marker_ttl",
        "allow_counter": "allow_msg_counter",
        "allow_batch": "allow_atomic",
        "allow_schedules": "allow_msg_schedules",
        "compression": "compression",
        "persist_mode": "persist_mode",
    }
    for dest, key in simple.items():
        if dest in v:
            out[key] = v[dest]
    if "subjects" in v:
        out["subjects"] = _split(v["subjects"])
    if "storage" in v:
        out["storage"] = "memory" if v["storage"] in ("m", "memory") else "file"
    if "ack" in v:
        out["no_ack"] = not v["ack"]
    if "retention" in v:
        out["retention"] = {"workq": "workqueue", "work": "workqueue"}.get(
            v["retention"], v["retention"]
        )
    if "discard" in v:
        out["discard"] = v["discard"]
    if v.get("discard_per_subject") is not None:
        out["discard_new_per_subject"] = bool(v["discard_per_subject"])
        if v["discard_per_subject"]:
            out["discard"] = "new"
    _apply_nested(out, v)
    return out


def _apply_nested(out: dict[str, Any], v: dict[str, Any]) -> None:
    if "tags" in v or "cluster" in v:
        placement = dict(out.get("placement") or {})
        if "tags" in v:
            placement["tags"] = _split(v["tags"])
        if "cluster" in v:
            placement["cluster"] = v["cluster"]
        out["placement"] = placement
    if "mirror" in v:
        out["mirror"] = {"name": v["mirror"]}
        out.pop("subjects", None)
    if "sources" in v:
        out["sources"] = [{"name": n} for n in _split(v["sources"])]
    if "transform_source" in v or "transform_destination" in v:
        st = dict(out.get("subject_transform") or {})
        st["src"] = v.get("transform_source", st.get("src", ""))
        st["dest"] = v.get("transform_destination", st.get("dest", ""))
        out["subject_transform"] = st
    if any(k in v for k in ("republish_source", "republish_destination", "republish_headers")):
        rp = dict(out.get("republish") or {})
        rp["src"] = v.get("republish_source", rp.get("src", ""))
        rp["dest"] = v.get("republish_destination", rp.get("dest", ""))
        rp["headers_only"] = bool(v.get("republish_headers", rp.get("headers_only", False)))
        out["republish"] = rp
    if "limit_consumer_inactive" in v or "limit_consumer_max_pending" in v:
        cl = dict(out.get("consumer_limits") or {})
        if "limit_consumer_inactive" in v:
            cl["inactive_threshold"] = v["limit_consumer_inactive"]
        if "limit_consumer_max_pending" in v:
            cl["max_ack_pending"] = v["limit_consumer_max_pending"]
        out["consumer_limits"] = cl
    if "metadata" in v:
        meta = dict(out.get("metadata") or {})
        for item in v["metadata"]:
            key, sep, value = str(item).partition("=")
            if not sep or not key:
                raise CliError(f"--metadata: {item!r} is not KEY=VALUE", 2)
            meta[key] = value
        out["metadata"] = meta


def load_file(path: str) -> dict[str, Any]:
    try:
        body = json.loads(Path(path).read_text())
    except OSError as exc:
        raise CliError(f"could not read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CliError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise CliError(f"{path} must hold a JSON object")
    # Accept a full stream info (as `stream info --json` prints) as well as a bare config.
    inner = body.get("config")
    config: dict[str, Any] = inner if isinstance(inner, dict) else body
    return dict(config)


# (dest, question, default): asked in this order when missing, as the nats CLI asks.
_QUESTIONS: tuple[tuple[str, str, str], ...] = (
    ("storage", "Storage (file, memory)", "file"),
    ("replicas", "Replication", "1"),
    ("retention", "Retention Policy (limits, interest, workq)", "limits"),
    ("discard", "Discard Policy (old, new)", "old"),
    ("max_msgs", "Stream Messages Limit", "-1"),
    ("max_msgs_per_subject", "Per Subject Messages Limit", "-1"),
    ("max_bytes", "Total Stream Size", "-1"),
    ("max_age", "Message TTL", "-1"),
    ("max_msg_size", "Max Message Size", "-1"),
    ("dupe_window", "Duplicate tracking time window", "2m0s"),
)
_YES_NO: tuple[tuple[str, str, bool, bool], ...] = (
    # (dest, question, default answer, stored value is the answer inverted)
    ("allow_rollup", "Allow message Roll-ups", False, False),
    ("deny_delete", "Allow message deletion", True, True),
    ("deny_purge", "Allow purging subjects or the entire stream", True, True),
)


_INTEGERS = ("replicas", "max_msgs", "max_msgs_per_subject")
_CHOICES = {
    "storage": ("file", "f", "memory", "m"),
    "retention": ("limits", "interest", "workq", "work"),
    "discard": ("old", "new"),
}


def ask_missing(name: str, flags: dict[str, Any]) -> dict[str, Any]:
    """Asks (on a terminal) for the values ``stream add`` needs and that were not given."""
    out = dict(flags)
    if "subjects" not in out and "mirror" not in out:
        out["subjects"] = (prompts.text("Subjects", name, required=True),)
    for dest, question, default in _QUESTIONS:
        if dest in out:
            continue
        answer = prompts.text(question, default)
        if dest in _CHOICES and answer not in _CHOICES[dest]:
            raise CliError(f"invalid {dest} {answer!r}: one of {', '.join(_CHOICES[dest])}", 2)
        if dest in _INTEGERS:
            try:
                out[dest] = int(answer)
            except ValueError:
                raise CliError(f"{question}: {answer!r} is not a whole number", 2) from None
        else:
            out[dest] = answer
    for dest, question, yes_default, inverted in _YES_NO:
        if dest not in out:
            yes = prompts.yes_no(question, yes_default)
            out[dest] = (not yes) if inverted else yes
    return out


def new_config(name: str) -> dict[str, Any]:
    """What ``stream add`` starts from; the server fills every other default."""
    return {
        "name": name,
        "subjects": [name],
        "retention": "limits",
        "storage": "file",
        "discard": "old",
        "num_replicas": 1,
        "max_consumers": -1,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 0,
        "max_msgs_per_subject": -1,
        "max_msg_size": -1,
        "allow_direct": True,
    }
