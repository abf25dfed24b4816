"""Account imports: the subject mappings of ``prefix``/``to`` (nats-server's reading: the
i-th wildcard of one side to the i-th of the other, ``$N`` naming one), their checks with
nats-server's texts, and how ``/accountz`` shows a config account's exports and imports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jetraft.config.errors import ConfigError
from jetraft.config.model import AccountConfig, AccountImport, ServerConfig
from jetraft.protocol.subjects import filter_intersection
from jetraft.protocol.transform import SubjectTransform, TransformError

Mapper = Callable[[str], str | None]


def identity(subject: str) -> str | None:
    return subject


def _is_wildcard(token: str) -> bool:
    return token in ("*", ">")


def _position(token: str) -> int:
    """N for a ``$N`` token (a wildcard named by its place), else 0."""
    return int(token[1:]) if token[:1] == "$" and token[1:].isdigit() else 0


def untokenize(subject: str) -> str:
    """``$N`` tokens read as the wildcards they stand for (``n.$2.*`` -> ``n.*.*``)."""
    return ".".join("*" if _position(t) else t for t in subject.split("."))


def _transform(src: str, dest: str) -> Mapper:
    """Subjects matching ``src`` (wildcards only) -> ``dest`` (``$N``: the token at the N-th
    wildcard of ``src``, ``>``: the rest). Raises TransformError."""
    transform = SubjectTransform.create(src, dest, strict=True)
    assert transform is not None
    stoks = src.split(".")

    def mapped(subject: str) -> str | None:
        # Matched here, not by ``transform.match``: a published subject may hold a token
        # that reads as a wildcard (nats-py's CONSUMER.CREATE.<stream>.<name>.<filter>).
        toks = subject.split(".")
        return transform.apply(toks) if _tokens_match(stoks, toks) else None

    return mapped


def source_filter(imported: str, local: str, wanted: str) -> str | None:
    """What a stream import must take in the exporting account (``imported``, shown as
    ``local`` in the importer) for the importer's subscription ``wanted``: the subjects whose
    mapping ``wanted`` matches (None: none). Exact for the identity and ``prefix`` mappings;
    for other mappings the whole ``imported`` subject (a superset: the mapping sorts out)."""
    if local == imported:
        return filter_intersection(wanted, imported)
    if local.endswith("." + imported):
        prefix = local[: -len(imported) - 1].split(".")
        toks = wanted.split(".")
        for i, p in enumerate(prefix):
            if i >= len(toks):
                return None
            if toks[i] == ">":
                return imported
            if toks[i] not in ("*", p):
                return None
        rest = toks[len(prefix) :]
        return filter_intersection(".".join(rest), imported) if rest else None
    return imported if filter_intersection(wanted, local) is not None else None


def stream_mapper(subject: str, local: str) -> Mapper:
    """A stream import's subjects in the exporting account -> the importer's: the i-th ``*``
    of ``local`` takes the token at the i-th wildcard of ``subject`` (``$N`` names one)."""
    if subject == local:
        return identity
    if not any(_is_wildcard(t) for t in subject.split(".")):
        return lambda _: local
    tokens = local.split(".")
    n = 0
    for i, t in enumerate(tokens):
        if t == "*":
            n += 1
            tokens[i] = f"${n}"
    return _transform(subject, ".".join(tokens))


def service_mapper(local: str, subject: str) -> Mapper:
    """A service import's request subjects in the importer (``local``) -> the exporting
    account's (``subject``): the k-th ``*`` of ``subject`` takes the token at the wildcard
    of ``local`` that is k-th in order, or that ``$k`` names."""
    if local == subject:
        return identity
    if not any(_is_wildcard(t) for t in subject.split(".")):
        return lambda _: subject  # every request goes to the one subject (nats-server)
    ltoks = local.split(".")
    names: dict[int, int] = {}  # k -> the place of local's wildcard standing for it
    place = 0
    for t in ltoks:
        if t == "*" or _position(t):
            place += 1
            names[_position(t) or place] = place
    dest: list[str] = []
    k = 0
    for t in subject.split("."):
        if t == "*":
            k += 1
            dest.append(f"${names.get(k, k)}")
        else:
            dest.append(t)
    return _transform(untokenize(local), ".".join(dest))


def _tokens_match(pattern: list[str], toks: list[str]) -> bool:
    for i, p in enumerate(pattern):
        if p == ">":
            return len(toks) > i
        if i >= len(toks) or (p != "*" and p != toks[i]):
            return False
    return len(toks) == len(pattern)


def build_mapper(imp: AccountImport) -> Mapper:
    """The import's subject mapping; a ConfigError (nats-server's text) when it has none."""
    try:
        if imp.service:
            return service_mapper(imp.local, imp.subject)
        return stream_mapper(imp.subject, imp.local)
    except TransformError as exc:
        kind = "service" if imp.service else "stream"
        src, dest = (untokenize(imp.local), imp.subject) if imp.service else (
            imp.subject, imp.local)
        raise ConfigError(
            f'Error adding {kind} import "{imp.subject}": failed to create mapping transform '
            f'for {kind} import subject from "{src}" to "{dest}": {exc}', imp.pos,
        ) from None


def check_imports(cfg: ServerConfig) -> None:
    """Every import's mapping compiles (the server refuses to start otherwise)."""
    for acc in cfg.accounts:
        for imp in acc.imports:
            build_mapper(imp)


_RESPONSE_NAMES = {"Singleton": "Singleton", "Stream": "Streamed", "Chunked": "Chunked"}


def accountz_fields(cfg: AccountConfig) -> dict[str, Any]:
    """An account's exports and imports as nats-server's ``/accountz`` shows them (its lists
    come from maps, in no fixed order: here services, then streams among the exports, and
    the other way round among the imports, each in the config's order), without the system
    account's per-account services, which jetraft does not import."""
    out: dict[str, Any] = {}
    exports: list[dict[str, Any]] = []
    for service in (True, False):
        for e in cfg.exports:
            if e.service != service:
                continue
            kind = "service" if service else "stream"
            item: dict[str, Any] = {"subject": e.subject, "type": kind}
            if service:
                item["response_type"] = _RESPONSE_NAMES[e.response_type]
            if e.accounts:
                item["approved_accounts"] = list(e.accounts)
            exports.append(item)
    if exports:
        out["exports"] = exports
    imports: list[dict[str, Any]] = []
    for service in (False, True):
        for i in cfg.imports:
            if i.service != service:
                continue
            local = untokenize(i.local)
            item = {"subject": i.subject, "account": i.account}
            if service:
                item["to"] = local
            item.update({"local_subject": local, "type": "service" if service else "stream",
                         "invalid": False, "share": False, "tracking": False})
            imports.append(item)
    if imports:
        out["imports"] = imports
    return out
