"""``exports [...]`` and ``imports [...]`` of config accounts -> typed values, and the checks
nats-server makes once every account is known (who may import what, cycles, duplicates),
with its error texts.

Whether a ``to`` mapping is a valid transform is checked by the server when it builds the
forwarders (the transform language lives in ``jetraft.protocol``, which this package does
not import); those errors point back here through ``AccountImport.pos``.

What jetraft does not implement (latency tracking, message tracing across imports, sharing
the requester's details, export token positions) is refused: an import that would quietly
behave differently from the configuration must not start.
"""

from __future__ import annotations

from collections.abc import Sequence

from jetraft.config.errors import ConfigError
from jetraft.config.model import (
    DEFAULT_RESPONSE_THRESHOLD_NS,
    RESPONSE_CHUNKED,
    RESPONSE_SINGLETON,
    RESPONSE_STREAM,
    AccountConfig,
    AccountExport,
    AccountImport,
)
from jetraft.config.syntax import Node
from jetraft.config.values import describe, fail, parse_go_duration, refuse

_RESPONSE_TYPES = {
    "single": RESPONSE_SINGLETON, "singleton": RESPONSE_SINGLETON,
    "stream": RESPONSE_STREAM, "chunk": RESPONSE_CHUNKED, "chunked": RESPONSE_CHUNKED,
}
_RESPONSE_KEYS = ("response", "response_type")
_THRESHOLD_KEYS = ("threshold", "response_threshold", "response_max_time", "response_time")
_WHITESPACE = frozenset(" \t\r\n\f\v")


def _unknown(key: str, node: Node) -> ConfigError:
    return ConfigError(f'unknown field "{key}"', node.key_pos or node.pos)


def _go_type(node: Node) -> str:
    """The Go type nats-server names in its texts for a config value."""
    v = node.value
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int64"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "[]interface {}"
    return "map[string]interface {}"


def _string(node: Node, what: str) -> str:
    if not isinstance(node.value, str):
        raise fail(node, f"{what}, got {_go_type(node)}")
    return node.value


def build_exports(node: Node) -> tuple[AccountExport, ...]:
    if not isinstance(node.value, list):
        raise fail(node, f"Exports should be an array, got {_go_type(node)}")
    return tuple(_export(item) for item in node.value)


def _export(item: Node) -> AccountExport:
    if not isinstance(item.value, dict):
        raise fail(item, f"Export Items should be a map with type entry, got {_go_type(item)}")
    members: dict[str, Node] = item.value
    keys = {k.lower(): (k, v) for k, v in members.items() if not v.used}
    stream, service = keys.get("stream"), keys.get("service")
    if stream is not None and service is not None:
        # nats-server names whichever it met second; the file's order decides here.
        first, second = (stream, service) if _before(stream[1], service[1]) else (service, stream)
        raise fail(second[1], f'Detected {second[0].lower()} "{second[1].value}" but already '
                              f"saw a {first[0].lower()}")
    if stream is None and service is None:
        raise fail(item, "Export Items need a stream or a service subject")
    kind, subject_node = stream if stream is not None else service  # type: ignore[misc]
    is_service = service is not None
    subject = _string(subject_node, f"Expected {kind.lower()} name to be string")
    accounts: tuple[str, ...] | None = None
    response_type = RESPONSE_SINGLETON
    threshold_ns: int | None = None
    seen_response = False
    for key, child in members.items():
        k = key.lower()
        if child.used or k in ("stream", "service"):
            continue
        if k in _RESPONSE_KEYS:
            if seen_response:
                raise fail(child, "Duplicate response type definition")
            seen_response = True
            if not is_service:
                raise fail(child, "Detected response directive on non-service")
            text = _string(child, "Expected response type to be string")
            rt = _RESPONSE_TYPES.get(text.lower())
            if rt is None:
                raise fail(child, f'Unknown response type: "{text}"')
            response_type = rt
        elif k in _THRESHOLD_KEYS:
            if threshold_ns is not None:
                raise fail(child, "Duplicate response threshold detected")
            threshold_ns = _threshold(child)
            if not is_service:
                raise fail(child, "Detected response directive on non-service")
        elif k == "accounts":
            if not isinstance(child.value, list):
                raise fail(child, f"'accounts' must be a list of account names, got "
                                  f"{describe(child)}")
            accounts = tuple(_string(a, "Expected an account name to be string")
                             for a in child.value)
        elif k == "latency":
            if not is_service:
                raise fail(child, "Detected latency directive on non-service")
            raise refuse(key, child, "service latency tracking")
        elif k == "allow_trace":
            if not is_service:
                raise fail(child, "Detected allow_trace directive on non-service")
            if child.value is not False:
                raise refuse(key, child, "message tracing across accounts")
        elif k == "account_token_position":
            raise refuse(key, child, "exports authorized by a subject token")
        else:
            raise _unknown(key, child)
    return AccountExport(
        is_service, subject, accounts or None, response_type,
        threshold_ns if threshold_ns is not None else DEFAULT_RESPONSE_THRESHOLD_NS,
        subject_node.pos,
    )


def _threshold(node: Node) -> int:
    text = node.value
    if not isinstance(text, str):
        raise fail(node, "Expected response threshold to be a parseable time duration, got "
                         f"{_go_type(node)}")
    try:
        ns = parse_go_duration(text)
    except ValueError:
        raise fail(node, "Expected response threshold to be a parseable time duration, got "
                         f'"{text}"') from None
    if ns <= 0:
        raise fail(node, f"response threshold must be positive, got \"{text}\"")
    return ns


def build_imports(node: Node) -> tuple[AccountImport, ...]:
    if not isinstance(node.value, list):
        raise fail(node, f"Imports should be an array, got {_go_type(node)}")
    out: list[AccountImport] = []
    for item in node.value:
        imp = _import(item)
        if imp.service:
            for dup in out:
                if dup.service and dup.local == imp.local and dup.account == imp.account:
                    raise fail(item, f'Duplicate service import subject "{imp.local}", '
                                     f'previously used in import for account "{dup.account}", '
                                     f'subject "{dup.subject}"')
        out.append(imp)
    return tuple(out)


def _import(item: Node) -> AccountImport:
    if not isinstance(item.value, dict):
        raise fail(item, f"Import Items should be a map with type entry, got {_go_type(item)}")
    members: dict[str, Node] = item.value
    keys = {k.lower(): v for k, v in members.items() if not v.used}
    stream, service = keys.get("stream"), keys.get("service")
    if stream is not None and service is not None:
        second, other = (service, "stream") if _before(stream, service) else (stream, "service")
        kind = "service" if other == "stream" else "stream"
        raise fail(second, f"Detected {kind} but already saw a {other}")
    if stream is None and service is None:
        raise fail(item, "Import Items need a stream or a service")
    is_service = service is not None
    entry = service if service is not None else stream
    assert entry is not None
    account, subject = _account_entry(entry, "Service" if is_service else "Stream")
    prefix = to = None
    for key, child in members.items():
        k = key.lower()
        if child.used or k in ("stream", "service"):
            continue
        if k == "prefix":
            prefix = _string(child, "Expected prefix to be string")
        elif k == "to":
            to = _string(child, "Expected to to be string")
        elif k == "share":
            if child.value is not False:
                raise refuse(key, child, "sharing the requester's details with the service")
        elif k == "allow_trace":
            if is_service:
                raise fail(child, "Detected allow_trace directive on a non-stream")
            if child.value is not False:
                raise refuse(key, child, "message tracing across accounts")
        else:
            raise _unknown(key, child)
    if is_service:
        return AccountImport(True, account, subject, to or subject, entry.pos)
    if prefix is not None and to is not None:
        raise fail(members.get("to", item),
                   "Stream import can not have a 'prefix' and a 'to' property")
    if prefix:
        if not _literal(prefix):
            raise fail(item, f'Error adding stream import "{subject}": stream import prefix can '
                             "not contain wildcard tokens")
        local = prefix + subject if prefix.endswith(".") else f"{prefix}.{subject}"
    else:
        local = to or subject
    return AccountImport(False, account, subject, local, entry.pos)


def _before(a: Node, b: Node) -> bool:
    return (a.pos.line, a.pos.col) < (b.pos.line, b.pos.col)


def _account_entry(node: Node, kind: str) -> tuple[str, str]:
    if not isinstance(node.value, dict):
        raise fail(node, f"{kind} entry should be an account map, got {_go_type(node)}")
    account = subject = ""
    for key, child in node.value.items():
        k = key.lower()
        if child.used:
            continue
        if k == "account":
            account = _string(child, "Expected account to be string")
        elif k == "subject":
            subject = _string(child, "Expected subject to be string")
        else:
            raise _unknown(key, child)
    if not account or not subject:
        raise fail(node, "Expect an account name and a subject")
    return account, subject


# --- checks across accounts (after every account is known) ---------------------------------


def check_imports(accounts: Sequence[AccountConfig]) -> None:
    """nats-server's checks, in its order: exports name known accounts; each import names a
    known account that exports the subject to it, is no duplicate and closes no cycle
    (imports are added one by one, a cycle is found by the import that closes it)."""
    by_name = {a.name: a for a in accounts}
    for acc in accounts:
        for exp in acc.exports:
            kind = "service" if exp.service else "stream"
            if not _valid_subject(exp.subject):
                raise ConfigError(f'Error adding {kind} export "{exp.subject}": invalid subject',
                                  exp.pos)
            for name in exp.accounts or ():
                if name not in by_name:
                    raise ConfigError(f'"{name}" account not defined for {kind} export',
                                      exp.pos)
    added: dict[str, list[AccountImport]] = {a.name: [] for a in accounts}
    for service in (False, True):
        for acc in accounts:
            for imp in acc.imports:
                if imp.service == service:
                    _check_import(acc, imp, by_name, added)
                    added[acc.name].append(imp)


def _check_import(
    acc: AccountConfig,
    imp: AccountImport,
    by_name: dict[str, AccountConfig],
    added: dict[str, list[AccountImport]],
) -> None:
    kind = "service" if imp.service else "stream"
    dest = by_name.get(imp.account)
    if dest is None:
        raise ConfigError(f'"{imp.account}" account not defined for {kind} import', imp.pos)

    def error(reason: str) -> ConfigError:
        return ConfigError(f'Error adding {kind} import "{imp.subject}": {reason}', imp.pos)

    if imp.service and not (_valid_subject(imp.subject) and _valid_subject(imp.local)):
        raise error("invalid subject")
    if not _authorized(dest, acc.name, imp.subject, imp.service):
        raise error(f"{kind} import not authorized")
    if imp.service:
        if _service_cycle(dest.name, imp.local, {acc.name}, added):
            raise error("import forms a cycle")
        return
    if not _valid_subject(imp.local):
        raise error("invalid subject")
    for subject in (imp.local, imp.subject):
        if _stream_cycle(dest, subject, {acc.name}, by_name, added):
            raise error("import forms a cycle")
    if any(not o.service and o.account == imp.account and o.subject == imp.subject
           for o in added[acc.name]):
        raise error("stream import already exists")


def _authorized(dest: AccountConfig, importer: str, subject: str, service: bool) -> bool:
    """Does ``dest`` export ``subject`` (exactly, or an export covering it) to ``importer``?"""
    if not _valid_subject(subject):
        return False
    exports = [e for e in dest.exports if e.service == service]
    exact = [e for e in exports if e.subject == subject]
    candidates = exact or [e for e in exports if _is_subset(subject, e.subject)]
    return any(e.accounts is None or importer in e.accounts for e in candidates)


def _service_cycle(
    name: str, subject: str, visited: set[str], added: dict[str, list[AccountImport]]
) -> bool:
    """nats-server's walk: the service imports of ``name`` whose subject could meet
    ``subject`` lead on to their exporters; reaching an account already visited is a cycle."""
    if len(visited) >= 1024:
        return True
    for si in added.get(name, ()):
        if si.service and _overlap(subject, si.subject):
            if si.account in visited:
                return True
            visited.add(name)
            nxt = si.local if _is_subset(si.local, subject) else subject
            if _service_cycle(si.account, nxt, visited, added):
                return True
    return False


def _stream_cycle(
    dest: AccountConfig,
    subject: str,
    visited: set[str],
    by_name: dict[str, AccountConfig],
    added: dict[str, list[AccountImport]],
) -> bool:
    """As nats-server: only an account that exports ``subject`` can pass it on; its stream
    imports that could deliver on ``subject`` lead on to their exporters."""
    if len(visited) >= 1024:
        return True
    if not any(not e.service and _is_subset(subject, e.subject) for e in dest.exports):
        return False
    for si in added.get(dest.name, ()):
        if not si.service and _overlap(subject, si.local):
            if si.account in visited:
                return True
            visited.add(dest.name)
            nxt = si.local if _is_subset(si.local, subject) else subject
            if _stream_cycle(by_name[si.account], nxt, visited, by_name, added):
                return True
    return False


# --- subjects (the config package imports no other part of jetraft) -------------------------


def _valid_subject(subject: str) -> bool:
    """nats-server's IsValidSubject: non-empty tokens, no whitespace, '>' only last."""
    if not subject or any(c in _WHITESPACE for c in subject):
        return False
    tokens = subject.split(".")
    return all(tokens) and ">" not in tokens[:-1]


def _literal(subject: str) -> bool:
    return all(t not in ("*", ">") for t in subject.split("."))


def _is_subset(sub: str, sup: str) -> bool:
    """Is every subject ``sub`` matches also matched by ``sup``?"""
    ts, tp = sub.split("."), sup.split(".")
    for i, p in enumerate(tp):
        if p == ">":
            return len(ts) > i
        if i >= len(ts) or ts[i] == ">":
            return False
        if p != "*" and ts[i] != p:
            return False
    return len(ts) == len(tp)


def _overlap(a: str, b: str) -> bool:
    """Could one literal subject match both?"""
    ta, tb = a.split("."), b.split(".")
    for i in range(max(len(ta), len(tb))):
        xa = ta[i] if i < len(ta) else None
        xb = tb[i] if i < len(tb) else None
        if xa == ">" or xb == ">":
            return xa is not None and xb is not None
        if xa is None or xb is None:
            return False
        if xa != xb and "*" not in (xa, xb):
            return False
    return True
