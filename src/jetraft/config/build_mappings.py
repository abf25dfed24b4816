"""``mappings {}`` (top level for the global account, or inside an account): subject
mappings, with nats-server's checks of the structure. Whether a destination is a valid
transform is checked by the server when it builds the account's mapper (the transform
language lives in ``jetraft.protocol``, which this package does not import); its errors
point back here through ``SubjectMapping.pos``."""

from __future__ import annotations

import json

from jetraft.config.errors import ConfigError
from jetraft.config.model import MappingDestination, SubjectMapping
from jetraft.config.syntax import Node
from jetraft.config.values import as_map, describe, fail

_WHITESPACE = frozenset(" \t\r\n\f\v")


def _valid_subject(subject: str) -> bool:
    """nats-server's IsValidSubject: non-empty tokens, no whitespace, '>' only last."""
    if not subject or any(c in _WHITESPACE for c in subject):
        return False
    tokens = subject.split(".")
    return all(tokens) and ">" not in tokens[:-1]


def build_mappings(node: Node, name: str) -> tuple[SubjectMapping, ...]:
    out: list[SubjectMapping] = []
    for src, child in as_map(node, name).items():
        if not _valid_subject(src):
            raise fail(child, f"Subject {json.dumps(src)} is not a valid subject")
        v = child.value
        if isinstance(v, str):
            dests: tuple[MappingDestination, ...] = (MappingDestination(v),)
            out.append(SubjectMapping(src, dests, child.pos, single=True))
        elif isinstance(v, list):
            dests = tuple(_destination(item) for item in v)
            out.append(SubjectMapping(src, dests, child.pos))
        elif isinstance(v, dict):
            out.append(SubjectMapping(src, (_destination(child),), child.pos))
        else:
            raise fail(child, "Expected an entry for the mapping destination")
        _check_weights(out[-1])
    return tuple(out)


def _destination(node: Node) -> MappingDestination:
    if not isinstance(node.value, dict):
        raise fail(node, "Expected an entry for the mapping destination")
    subject, cluster, weight = "", "", -1
    for key, child in node.value.items():
        k = key.lower()
        if k in ("dest", "destination"):
            if not isinstance(child.value, str):
                raise fail(child, f"mapping destination must be a string, got {describe(child)}")
            subject = child.value
        elif k == "weight":
            weight = _weight(child)
        elif k == "cluster":
            if not isinstance(child.value, str):
                raise fail(child, f"mapping cluster must be a string, got {describe(child)}")
            cluster = child.value
        else:
            raise fail(child, f'Unknown field "{key}" for mapping destination')
    if weight < 0:
        raise fail(node, f'Missing weight for mapping destination "{subject}"')
    return MappingDestination(subject, weight, cluster)


def _weight(node: Node) -> int:
    v = node.value
    if isinstance(v, bool) or not isinstance(v, str | int):
        raise fail(node, f"Unknown entry type for weight of {describe(node)}")
    if isinstance(v, str):
        text = v.removesuffix("%")
        digits = text.lstrip("+-")
        if not digits.isascii() or not digits.isdigit():
            raise fail(node, f'Invalid weight "{text}" for mapping destination')
        v = int(text)
    if not 0 <= v <= 100:
        raise fail(node, f"Invalid weight {v} for mapping destination")
    return v


def _check_weights(m: SubjectMapping) -> None:
    """Duplicates and totals per cluster (nats-server's checks before the transforms)."""
    seen: set[str] = set()
    totals: dict[str, int] = {}
    for d in m.destinations:
        if d.subject in seen:
            raise m.error(f'duplicate entry for "{d.subject}"')
        seen.add(d.subject)
        totals[d.cluster] = totals.get(d.cluster, 0) + d.weight
        if totals[d.cluster] > 100:
            raise m.error("total weight needs to be <= 100")


__all__ = ["ConfigError", "build_mappings"]
