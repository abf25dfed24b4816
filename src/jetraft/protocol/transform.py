"""Subject transforms: nats-server's subject mapping language, without I/O.

A transform has a source (a subject filter, ``>`` when empty) and a destination. A literal
subject that matches the source is rewritten token by token into the destination, whose
tokens are literals, ``>`` (the rest of the subject, when the source ends in ``>`` too),
``$N`` (the subject's token at the source's N-th ``*``) or a mustache function:

* ``{{wildcard(N)}}``: same as ``$N``;
* ``{{partition(P, N...)}}``: FNV-1a (32 bit) of the tokens at the given wildcards (the whole
  subject when none are given) modulo P, the hash nats-server uses, so partitions agree;
* ``{{split(N, delim)}}``: the token cut into several at every ``delim``;
* ``{{splitfromleft(N, pos)}}`` / ``{{splitfromright(N, pos)}}``: cut in two at ``pos``
  counted from the left / right;
* ``{{slicefromleft(N, size)}}`` / ``{{slicefromright(N, size)}}``: cut into pieces of
  ``size`` starting from the left / right;
* ``{{left(N, len)}}`` / ``{{right(N, len)}}``: keep only the first / last ``len`` characters;
* ``{{random(P)}}``: a random number below P (the caller injects the randomness).

Function names are case-insensitive in their first letter of each word, as in nats-server,
and arguments are separated by commas. Validation refuses what nats-server refuses, with its
error texts (clients see them inside JetStream API errors, e.g. 10156 "stream transform:
..."). The functions cut strings by characters, nats-server by bytes: subjects outside
ASCII may be cut differently.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from jetraft.protocol.subjects import subject_matches

# Error texts of nats-server (clients see them inside API errors).
INVALID_DEST = "invalid mapping destination"
BAD_SUBJECT = "invalid subject"
ERR_INVALID_TRANSFORM = f"{INVALID_DEST}: invalid transform"
ERR_NOT_ALL_WILDCARDS = f"{INVALID_DEST}: not using all of the token wildcard(s)"
ERR_UNKNOWN_FUNCTION = f"{INVALID_DEST}: unknown function"
ERR_INDEX_OUT_OF_RANGE = f"{INVALID_DEST}: wildcard index out of range"
ERR_NOT_ENOUGH_ARGS = f"{INVALID_DEST}: not enough arguments passed to the function"
ERR_INVALID_ARG = f"{INVALID_DEST}: function argument is invalid or in the wrong format"
ERR_TOO_MANY_ARGS = f"{INVALID_DEST}: too many arguments passed to the function"
ERR_IMPORT_ONLY_WILDCARD = (
    f"{INVALID_DEST}: the only mapping function allowed for import transforms is {{{{Wildcard()}}}}"
)

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_FNV_OFFSET = 2166136261
_FNV_PRIME = 16777619


class TransformError(ValueError):
    """An invalid transform; ``str()`` is nats-server's text."""


def _dest_error(err: str, token: str) -> TransformError:
    return TransformError(f"{err} in {token}" if token else err)


class Fn(Enum):
    LITERAL = "literal"
    PARTITION = "partition"
    WILDCARD = "wildcard"
    SPLIT_FROM_LEFT = "splitfromleft"
    SPLIT_FROM_RIGHT = "splitfromright"
    SLICE_FROM_LEFT = "slicefromleft"
    SLICE_FROM_RIGHT = "slicefromright"
    SPLIT = "split"
    LEFT = "left"
    RIGHT = "right"
    RANDOM = "random"


def _fn_regex(name: str) -> re.Pattern[str]:
    # 'splitFromLeft' -> each word's first letter either case, as nats-server accepts.
    words = re.findall(r"[a-z]+|[A-Z][a-z]*", name)
    body = "".join(f"[{w[0].lower()}{w[0].upper()}]{w[1:].lower()}" for w in words)
    return re.compile(r"{{\s*" + body + r"\s*\((.*)\)\s*}}")


# The order in which a token is tried (matters: the patterns are searched, not anchored).
_FUNCTIONS: tuple[tuple[Fn, re.Pattern[str]], ...] = (
    (Fn.WILDCARD, _fn_regex("wildcard")),
    (Fn.PARTITION, _fn_regex("partition")),
    (Fn.SPLIT_FROM_LEFT, _fn_regex("splitFromLeft")),
    (Fn.SPLIT_FROM_RIGHT, _fn_regex("splitFromRight")),
    (Fn.SLICE_FROM_LEFT, _fn_regex("sliceFromLeft")),
    (Fn.SLICE_FROM_RIGHT, _fn_regex("sliceFromRight")),
    (Fn.RIGHT, _fn_regex("right")),
    (Fn.LEFT, _fn_regex("left")),
    (Fn.SPLIT, _fn_regex("split")),
    (Fn.RANDOM, _fn_regex("random")),
)
_PATTERNS = dict(_FUNCTIONS)
# What validate_mapping recognises as a function (nats-server leaves left/right out there).
_VALIDATED = (Fn.PARTITION, Fn.WILDCARD, Fn.SPLIT_FROM_LEFT, Fn.SPLIT_FROM_RIGHT,
              Fn.SLICE_FROM_LEFT, Fn.SLICE_FROM_RIGHT, Fn.SPLIT, Fn.RANDOM)
_ARG_SEP = re.compile(r",\s*")
_DECIMAL = re.compile(r"[+-]?[0-9]+")
_WHITESPACE = frozenset(" \t\n\f\r")


def _atoi(text: str, limit: int = _INT64_MAX) -> int | None:
    """A decimal integer as Go's strconv parses it (sign allowed, nothing else), or None."""
    text = text.strip(" ")
    if not _DECIMAL.fullmatch(text):
        return None
    value = int(text)
    return value if -limit - 1 <= value <= limit else None


@dataclass(frozen=True, slots=True)
class DestToken:
    """One destination token: a literal or a function with its arguments."""

    fn: Fn
    text: str
    indexes: tuple[int, ...] = ()  # wildcard positions (1-based) named by the function
    num: int = -1  # partitions, position, size, length, ceiling
    delim: str = ""


def parse_dest_token(token: str) -> DestToken:
    """What one destination token does (raises TransformError for a malformed function)."""
    n = len(token)
    if n > 1 and token[0] == "$":
        digits = token[1:]
        if not _DECIMAL.fullmatch(digits) or abs(int(digits)) > _INT64_MAX:
            return DestToken(Fn.LITERAL, token)  # other $-tokens are plain literals
        return DestToken(Fn.WILDCARD, token, (int(digits),))
    if not (n > 4 and token.startswith("{{") and token.endswith("}}")):
        return DestToken(Fn.LITERAL, token)
    for fn, pattern in _FUNCTIONS:
        m = pattern.search(token)
        if m is not None:
            return _parse_function(fn, token, _ARG_SEP.split(m.group(1)))
    raise _dest_error(ERR_UNKNOWN_FUNCTION, token)


def _parse_function(fn: Fn, token: str, args: list[str]) -> DestToken:
    if fn is Fn.WILDCARD:
        if args == [""]:
            raise _dest_error(ERR_NOT_ENOUGH_ARGS, token)
        if len(args) > 1:
            raise _dest_error(ERR_TOO_MANY_ARGS, token)
        return DestToken(fn, token, (_int_arg(args[0], token),))
    if fn is Fn.PARTITION:
        count = _atoi(args[0])
        if count is None or count > _INT32_MAX:
            raise _dest_error(ERR_INVALID_ARG, token)
        indexes = tuple(_int_arg(a, token) for a in args[1:])
        return DestToken(fn, token, indexes, _to_int32(count))
    if fn is Fn.RANDOM:
        if len(args) != 1:
            raise _dest_error(ERR_NOT_ENOUGH_ARGS, token)
        ceiling = _atoi(args[0])
        if ceiling is None or ceiling > _INT32_MAX:
            raise _dest_error(ERR_INVALID_ARG, token)
        return DestToken(fn, token, (), _to_int32(ceiling))
    if len(args) < 2:
        raise _dest_error(ERR_NOT_ENOUGH_ARGS, token)
    if len(args) > 2:
        raise _dest_error(ERR_TOO_MANY_ARGS, token)
    index = _int_arg(args[0], token)
    if fn is Fn.SPLIT:
        if " " in args[1] or "." in args[1]:
            raise _dest_error(ERR_INVALID_ARG, token)
        return DestToken(fn, token, (index,), -1, args[1])
    num = _atoi(args[1], _INT32_MAX)
    if num is None:
        raise _dest_error(ERR_INVALID_ARG, token)
    return DestToken(fn, token, (index,), num)


def _int_arg(text: str, token: str) -> int:
    value = _atoi(text)
    if value is None:
        raise _dest_error(ERR_INVALID_ARG, token)
    return value


def _to_int32(value: int) -> int:
    """Go's int32(v) of a value that may be below the int32 range (wraps around)."""
    value &= 0xFFFFFFFF
    return value - 2**32 if value > _INT32_MAX else value


def _subject_info(subject: str) -> tuple[bool, list[str], int, bool]:
    """(valid, tokens, number of '*', has '>'): nats-server's loose check (no whitespace
    test) used for both ends of a transform."""
    if not subject:
        return False, [], 0, False
    tokens = subject.split(".")
    pwcs, fwc = 0, False
    for t in tokens:
        if not t or fwc:
            return False, [], 0, False
        if t == ">":
            fwc = True
        elif t == "*":
            pwcs += 1
    return True, tokens, pwcs, fwc


def fnv1a_32(data: bytes) -> int:
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & 0xFFFFFFFF
    return h


@dataclass(frozen=True, slots=True)
class Step:
    """A destination token ready to run: its function and the source token positions."""

    fn: Fn
    text: str
    positions: tuple[int, ...]
    num: int
    delim: str


class SubjectTransform:
    """A compiled transform; ``create`` validates, ``match``/``apply`` run it."""

    __slots__ = ("_fwc", "_identity", "_steps", "_stoks", "dest", "src", "uses_random")

    def __init__(self, src: str, dest: str, stoks: list[str], steps: list[Step]) -> None:
        self.src = src
        self.dest = dest
        self._stoks = stoks
        self._steps = steps
        self._fwc = dest.split(".")[-1] == ">"
        self._identity = src in ("", ">") and dest in ("", ">")
        self.uses_random = any(s.fn is Fn.RANDOM for s in steps)

    @classmethod
    def create(cls, src: str, dest: str, strict: bool = False) -> SubjectTransform | None:
        """Compile ``src -> dest``; None for an empty destination (no transform). ``strict``
        is for import mappings, which must be reversible: only wildcard functions, and
        every source wildcard used."""
        if not dest:
            return None
        src = src or ">"
        sv, stoks, npwcs, sfwc = _subject_info(src)
        dv, dtoks, dpwcs, dfwc = _subject_info(dest)
        if not sv or not dv or dpwcs > 0 or sfwc != dfwc:
            raise TransformError(BAD_SUBJECT)
        if npwcs > 0 or sfwc:
            steps = _steps_with_wildcards(stoks, dtoks, npwcs, strict, dest)
        else:
            steps = _steps_without_wildcards(dtoks)
        return cls(src, dest, stoks, steps)

    def __repr__(self) -> str:
        return f"SubjectTransform({self.src!r} -> {self.dest!r})"

    def match(self, subject: str, rng: random.Random | None = None) -> str | None:
        """The transformed subject, or None when ``subject`` is not a valid literal subject
        or does not match the source."""
        if self._identity:
            return subject
        tokens = subject.split(".")
        if any(not t or t in ("*", ">") for t in tokens):
            return None
        if self.src != ">" and not subject_matches(self.src, subject):
            return None
        return self.apply(tokens, rng)

    def apply(self, tokens: Sequence[str], rng: random.Random | None = None) -> str:
        """Transform a subject (as tokens) known to match the source."""
        out: list[str] = []
        for step in self._steps:
            if step.fn is Fn.LITERAL:
                if step.text == ">":
                    break
                out.append(step.text)
            else:
                out.append(_run(step, tokens, rng))
        if self._fwc:
            out.extend(tokens[len(self._stoks) - 1 :])
        return ".".join(out)


def _steps_with_wildcards(
    stoks: list[str], dtoks: list[str], npwcs: int, strict: bool, dest: str
) -> list[Step]:
    # wildcard number (1-based) -> position of that '*' in the source; other numbers
    # (0, negative) fall on position 0, as nats-server's lookup does.
    positions: dict[int, int] = {}
    for i, t in enumerate(stoks):
        if t == "*":
            positions[len(positions) + 1] = i
    used = 0
    steps: list[Step] = []
    for token in dtoks:
        d = parse_dest_token(token)
        if strict and d.fn not in (Fn.LITERAL, Fn.WILDCARD):
            raise _dest_error(ERR_IMPORT_ONLY_WILDCARD, token)
        if d.fn in (Fn.LITERAL, Fn.RANDOM):
            steps.append(Step(d.fn, token, (), d.num, ""))
            continue
        used += len(d.indexes)
        for index in d.indexes:
            if index > npwcs:
                raise _dest_error(ERR_INDEX_OUT_OF_RANGE, f"{token}: [{index}]")
        pos = tuple(positions.get(index, 0) for index in d.indexes)
        steps.append(Step(d.fn, token, pos, d.num, d.delim))
    if strict and used < npwcs:
        raise _dest_error(ERR_NOT_ALL_WILDCARDS, dest)
    return steps


def _steps_without_wildcards(dtoks: list[str]) -> list[Step]:
    steps: list[Step] = []
    for token in dtoks:
        d = parse_dest_token(token)
        if d.fn is Fn.LITERAL:
            steps.append(Step(d.fn, token, (), -1, ""))
        elif d.fn in (Fn.RANDOM, Fn.PARTITION):
            # Nothing to pick from: a partition hashes the whole subject.
            steps.append(Step(d.fn, token, (), d.num, ""))
        else:
            raise _dest_error(ERR_INDEX_OUT_OF_RANGE, token)
    return steps


def _run(step: Step, tokens: Sequence[str], rng: random.Random | None) -> str:
    fn, num = step.fn, step.num
    if fn is Fn.PARTITION:
        # The named tokens run together, or the whole subject for partition(n).
        named = step.positions
        key = "".join(tokens[p] for p in named) if named else ".".join(tokens)
        buckets = num & 0xFFFFFFFF
        return "0" if buckets == 0 else str(fnv1a_32(key.encode()) % buckets)
    if fn is Fn.RANDOM:
        if num == 0:
            return "0"
        draw = (rng or random).getrandbits(31)
        return str(draw % abs(num))
    pos = step.positions[0]
    if fn is Fn.WILDCARD:
        return tokens[pos] if pos < len(tokens) else ""
    tok = tokens[pos]
    size = len(tok)
    inside = 0 < num < size
    if fn is Fn.SPLIT:
        return _split(tok, step.delim)
    if not inside:
        return tok  # too short to cut: left whole
    if fn is Fn.SPLIT_FROM_LEFT:
        return f"{tok[:num]}.{tok[num:]}"
    if fn is Fn.SPLIT_FROM_RIGHT:
        return f"{tok[: size - num]}.{tok[size - num :]}"
    if fn is Fn.SLICE_FROM_LEFT:
        return ".".join(tok[i : i + num] for i in range(0, size, num))
    if fn is Fn.SLICE_FROM_RIGHT:
        head = size % num
        pieces = [tok[:head]] if head else []
        pieces.extend(tok[i : i + num] for i in range(head, size, num))
        return ".".join(pieces)
    if fn is Fn.LEFT:
        return tok[:num]
    return tok[size - num :]  # RIGHT


def _split(tok: str, delim: str) -> str:
    """Cut at every delimiter. Empty pieces are dropped with the separator before them,
    except that a run of delimiters after a leading one keeps one (nats-server's rule)."""
    pieces = list(tok) if delim == "" else tok.split(delim)
    out: list[str] = []
    last = len(pieces) - 1
    for j, piece in enumerate(pieces):
        out.append(piece)
        if j < last and pieces[j + 1] and not (j == 0 and not piece):
            out.append(".")
    return "".join(out)


def validate_mapping(src: str, dest: str) -> None:
    """nats-server's checks of a mapping destination (a stream's subject transform): every
    token non-empty, nothing after ``>``, no whitespace, mustache tokens naming a known
    function; then the transform must compile. Raises TransformError."""
    if not dest:
        return
    after_fwc = False
    for t in dest.split("."):
        if not t or after_fwc:
            raise _dest_error(ERR_INVALID_TRANSFORM, t)
        if len(t) > 4 and t.startswith("{{") and t.endswith("}}"):
            if not any(_PATTERNS[fn].search(t) for fn in _VALIDATED):
                raise _dest_error(ERR_UNKNOWN_FUNCTION, t)
            continue
        if t == ">":
            after_fwc = True
        elif any(c in _WHITESPACE for c in t):
            raise TransformError(ERR_INVALID_TRANSFORM)
    SubjectTransform.create(src, dest)
