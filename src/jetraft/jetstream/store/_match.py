"""Private, cached subject-filter matchers for the store's hot paths.

A filter is compiled once into the cheapest predicate that decides it: ``str.__eq__`` for a
literal, ``str.startswith`` for ``prefix.>``, a token compare otherwise. The store only ever
matches *stored* subjects, which were valid publish subjects (no empty tokens, no wildcards), so
``prefix.>`` needs no token split: a valid subject that starts with ``prefix.`` has at least one
more token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

Matcher = Callable[[str], bool]


def _always(_subject: str) -> bool:
    return True


def is_all(filter_subject: str) -> bool:
    """Does this filter match every subject? ("" is nats-server's "no filter")."""
    return filter_subject == "" or filter_subject == ">"


def is_literal(filter_subject: str) -> bool:
    return "*" not in filter_subject.split(".") and ">" not in filter_subject.split(".")


@lru_cache(maxsize=4096)
def compile_filter(filter_subject: str) -> Matcher:
    """A predicate deciding whether a stored subject matches ``filter_subject``."""
    if is_all(filter_subject):
        return _always
    tokens = filter_subject.split(".")
    if "*" not in tokens and ">" not in tokens:
        literal = filter_subject

        def equal(subject: str) -> bool:
            return subject == literal

        return equal
    tail = tokens[-1] == ">"
    if tail and "*" not in tokens:
        prefix = filter_subject[:-1]  # keeps the trailing '.'

        def starts(subject: str) -> bool:
            return subject.startswith(prefix)

        return starts
    body = tokens[:-1] if tail else tokens
    nbody = len(body)
    fixed = tuple((i, t) for i, t in enumerate(body) if t != "*")

    def tokens_match(subject: str) -> bool:
        parts = subject.split(".")
        if tail:
            if len(parts) <= nbody:
                return False
        elif len(parts) != nbody:
            return False
        return all(parts[i] == tok for i, tok in fixed)

    return tokens_match


@lru_cache(maxsize=1024)
def compile_filters(filters: tuple[str, ...]) -> Matcher:
    """A predicate for "matches any of ``filters``" (an empty tuple matches everything)."""
    if not filters or any(is_all(f) for f in filters):
        return _always
    if len(filters) == 1:
        return compile_filter(filters[0])
    matchers = tuple(compile_filter(f) for f in filters)

    def any_match(subject: str) -> bool:
        return any(m(subject) for m in matchers)

    return any_match


def normalize(filters: str | Sequence[str] | None) -> tuple[str, ...]:
    """The canonical key for a filter argument: () means "everything"."""
    if filters is None:
        return ()
    if isinstance(filters, str):
        return () if is_all(filters) else (filters,)
    if any(is_all(f) for f in filters):
        return ()
    if len(filters) == 1:
        return (filters[0],)
    return tuple(sorted(set(filters)))
