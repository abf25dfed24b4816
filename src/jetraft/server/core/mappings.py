"""Accounts' subject mappings from the config: built (and their transforms checked) once,
with config errors that point at the mapping in the file."""

from __future__ import annotations

import random
from collections.abc import Sequence

from jetraft.config.model import ServerConfig, SubjectMapping
from jetraft.protocol.mapping import Destination, Mapping, SubjectMapper
from jetraft.protocol.transform import TransformError


def build_mapper(
    mappings: Sequence[SubjectMapping], cluster: str = "", rng: random.Random | None = None
) -> SubjectMapper | None:
    """The mapper of an account's mappings (None without any); raises ConfigError."""
    if not mappings:
        return None
    built = []
    for m in mappings:
        dests = [Destination(d.subject, d.weight, d.cluster) for d in m.destinations]
        try:
            built.append(Mapping.build(m.src, dests))
        except TransformError as exc:
            raise m.error(str(exc)) from None
    return SubjectMapper(built, rng, cluster)


def check_mappings(cfg: ServerConfig) -> None:
    """Every mapping of the config compiles (the server refuses to start otherwise)."""
    build_mapper(cfg.mappings)
    for acc in cfg.accounts:
        build_mapper(acc.mappings)
