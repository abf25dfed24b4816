"""Subject rules: tokens separated by '.', '*' matches one token, '>' one or more trailing tokens.

Wildcards are only wildcards when they are a whole token: ``foo*`` is a literal token.
Subjects are case sensitive and may not contain whitespace or empty tokens.
"""

from __future__ import annotations

from functools import lru_cache

_WHITESPACE = frozenset(" \t\r\n\f\v")


def _tokens_ok(subject: str) -> bool:
    if not subject or subject[0] == "." or subject[-1] == ".":
        return False
    if ".." in subject:
        return False
    return not any(c in _WHITESPACE for c in subject)


@lru_cache(maxsize=8192)
def is_valid_filter(subject: str) -> bool:
    """A subscription subject: wildcards allowed, '>' only as the last token."""
    if not _tokens_ok(subject):
        return False
    tokens = subject.split(".")
    return all(tok != ">" for tok in tokens[:-1])


@lru_cache(maxsize=8192)
def is_valid_subject(subject: str) -> bool:
    """A publish subject: a valid filter without wildcard tokens."""
    if not _tokens_ok(subject):
        return False
    return all(tok not in ("*", ">") for tok in subject.split("."))


def is_literal(subject: str) -> bool:
    return all(tok not in ("*", ">") for tok in subject.split("."))


def subject_matches(filter_subject: str, subject: str) -> bool:
    """Does the literal ``subject`` match ``filter_subject`` (which may hold wildcards)?"""
    if filter_subject == subject:
        return True
    return _match_tokens(tuple(filter_subject.split(".")), subject)


def _match_tokens(ftoks: tuple[str, ...], subject: str) -> bool:
    stoks = subject.split(".")
    for i, ftok in enumerate(ftoks):
        if ftok == ">":
            return len(stoks) > i
        if i >= len(stoks):
            return False
        if ftok != "*" and ftok != stoks[i]:
            return False
    return len(stoks) == len(ftoks)


def filters_overlap(a: str, b: str) -> bool:
    """Could some literal subject match both filters?"""
    ta, tb = a.split("."), b.split(".")
    for i in range(max(len(ta), len(tb))):
        xa = ta[i] if i < len(ta) else None
        xb = tb[i] if i < len(tb) else None
        if xa == ">" or xb == ">":
            # '>' needs at least one token from the other side at this position.
            return xa is not None and xb is not None
        if xa is None or xb is None:
            return False
        if xa != xb and xa != "*" and xb != "*":
            return False
    return True


def filter_intersection(a: str, b: str) -> str | None:
    """The filter of the subjects both filters match (None: none; ``filters_overlap``
    says whether there is one)."""
    at, bt = a.split("."), b.split(".")
    out: list[str] = []
    for i in range(max(len(at), len(bt))):
        x = at[i] if i < len(at) else None
        y = bt[i] if i < len(bt) else None
        if x == ">" or y == ">":
            rest = bt[i:] if x == ">" else at[i:]
            return ".".join(out + rest) if rest else None
        if x is None or y is None:
            return None
        if x == "*":
            out.append(y)
        elif y == "*" or x == y:
            out.append(x)
        else:
            return None
    return ".".join(out)


def is_subset(sub: str, sup: str) -> bool:
    """Is every subject matched by ``sub`` also matched by ``sup``?"""
    ts, tp = sub.split("."), sup.split(".")
    for i, p in enumerate(tp):
        if p == ">":
            return len(ts) > i
        if i >= len(ts):
            return False
        s = ts[i]
        if s == ">":
            return False
        if p == "*":
            continue
        if s != p:
            return False
    return len(ts) == len(tp)
