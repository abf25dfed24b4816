"""The NATS configuration format: text -> a tree of positioned nodes.

A hand-written recursive-descent scanner that follows nats-server's conf/lex.go
behaviour (studied, not copied):

* ``key = value``, ``key: value`` and ``key value``; ``{}`` blocks may follow a key
  without a separator; values end at a newline, ``,`` or ``;``.
* arrays ``[...]`` separated by commas or newlines; ``#`` and ``//`` comments.
* ``"..."`` strings take the escapes ``\\xXX \\t \\n \\r \\" \\\\``; ``'...'`` strings
  are raw; bare strings end at whitespace, newline, ``, ; ] }`` and also take
  escapes (as in nats-server).
* bare words: booleans (true/false/yes/no/on/off), integers, integers with size
  suffixes (``k``=1000, ``kb``/``ki``/``kib``=1024, and so on to ``e``/``eib``, as
  nats-server), floats, Zulu datetimes, else strings (``0.0.0.0:6222`` stays a string).
* ``$NAME`` (and, as an extension, ``${NAME}``) in value position refers to a key
  already defined in an enclosing block, else to the environment (whose text is
  parsed as a value). Quoted strings are never expanded, and a bare ``$2a$...``
  bcrypt hash is a literal string. In key position ``$SYS`` is an ordinary key.
* ``include path`` merges another file (path relative to the including file);
  the included file sees only its own definitions, as in nats-server.

Every node keeps its position so that later validation can point at it.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jetraft.config.errors import ConfigError, Pos

MAX_NESTING = 64
MAX_INCLUDE_DEPTH = 16
MAX_ENV_DEPTH = 32
MAX_SOURCE_BYTES = 16 * 1024 * 1024

_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
_INT_RE = re.compile(r"-?[0-9]+")
_SIZED_RE = re.compile(r"(-?[0-9]+)([kKmMgGtTpPeE][bBiI]*)")
_FLOAT_RE = re.compile(r"-?[0-9]+\.[0-9]+")
_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_BRACED_VAR_RE = re.compile(r"\$\{([^\s{}\[\],;]*)\}")
_PAREN_END_RE = re.compile(r"\n\)(?:\n|\Z)")
_INT64_MAX = 2**63 - 1

_SUFFIXES: dict[str, int] = {}
for _n, _letter in enumerate("kmgtpe", start=1):
    _SUFFIXES[_letter] = 1000**_n
    for _tail in ("b", "i", "ib"):
        _SUFFIXES[_letter + _tail] = 1024**_n

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
_BARE_END = frozenset(" \t\r\n;,]}")
_KEY_END = frozenset(" \t\r\n=:{[]},;")
_NEWLINES = ("\n", "\r")


@dataclass(slots=True, eq=False)
class Node:
    """One value of the tree.

    ``value`` is str, int, float, bool, datetime, list[Node] or dict[str, Node].
    ``pos`` is where the value starts, ``key_pos`` where its key starts (map members).
    ``text`` is the source text of a bare scalar (so "2m" can still be read as a
    duration). ``used`` marks a definition that some ``$NAME`` referred to: like
    nats-server, validation does not report such keys as unknown.
    """

    value: Any
    pos: Pos
    key_pos: Pos | None = None
    text: str = ""
    used: bool = False


def _show(c: str) -> str:
    if c == "":
        return "end of file"
    if c in _NEWLINES:
        return "newline"
    return repr(c)


class _Parser:
    """Parses one source (a file, a string, or an environment value)."""

    def __init__(
        self,
        text: str,
        filename: str,
        base_dir: Path,
        env: Mapping[str, str],
        includes: tuple[str, ...],
        env_refs: set[str],
    ) -> None:
        self.text = text[1:] if text.startswith("\ufeff") else text
        self.n = len(self.text)
        self.i = 0
        self.file = filename
        self.base_dir = base_dir
        self.env = env
        self.includes = includes
        self.env_refs = env_refs
        self.scopes: list[dict[str, Node]] = []
        self.depth = 0
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]

    # -- positions and characters ------------------------------------------------

    def pos(self, i: int | None = None) -> Pos:
        at = self.i if i is None else i
        line = bisect.bisect_right(self.line_starts, at)
        return Pos(self.file, line, at - self.line_starts[line - 1] + 1)

    def error(self, message: str, i: int | None = None) -> ConfigError:
        return ConfigError(message, self.pos(i))

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.text[j] if j < self.n else ""

    def skip_hspace(self) -> None:
        while self.i < self.n and self.text[self.i] in " \t":
            self.i += 1

    def at_comment(self) -> bool:
        c = self.peek()
        return c == "#" or (c == "/" and self.peek(1) == "/")

    def skip_comment(self) -> None:
        while self.i < self.n and self.text[self.i] not in _NEWLINES:
            self.i += 1

    def skip_blank(self) -> None:
        """Skip whitespace, newlines and comments."""
        while self.i < self.n:
            if self.text[self.i].isspace():
                self.i += 1
            elif self.at_comment():
                self.skip_comment()
            else:
                return

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"blocks and arrays nested deeper than {MAX_NESTING} levels")

    # -- structure -----------------------------------------------------------------

    def parse_document(self) -> dict[str, Node]:
        root: dict[str, Node] = {}
        self.scopes.append(root)
        self.skip_blank()
        if self.peek() == "{":
            # nats-server accepts a JSON-like document wrapped in one pair of braces.
            open_i = self.i
            self.i += 1
            self.parse_body(root, open_i)
            self.skip_blank()
            if self.i < self.n:
                raise self.error(
                    f"unexpected {_show(self.peek())} after the '}}' that closes the "
                    f"top-level block opened at {self.pos(open_i).short()}"
                )
        else:
            self.parse_body(root, None)
        return root

    def parse_body(self, members: dict[str, Node], open_i: int | None) -> None:
        """Entries of the top level (open_i None) or of a block opened at open_i."""
        while True:
            self.skip_blank()
            c = self.peek()
            if c == "":
                if open_i is not None:
                    raise self.error(
                        f"expected '}}' to close block opened at {self.pos(open_i).short()}"
                    )
                return
            if c == "}":
                if open_i is None:
                    raise self.error("unexpected '}': no block is open")
                self.i += 1
                return
            self.parse_entry(members)
            self.parse_value_end()

    def parse_entry(self, members: dict[str, Node]) -> None:
        c = self.peek()
        if c in "=:":
            raise self.error(f"unexpected key separator {c!r}: expected a key")
        if c in "{[]),;":
            raise self.error(f"expected a key, found {c!r}")
        key_i = self.i
        if c in "\"'":
            key = self.read_quoted_key()
        else:
            key = self.read_bare_key()
            if key.lower() == "include" and self.peek().isspace():
                self.parse_include(members)
                return
        # Like nats-server, newlines may separate a key from its value or separator.
        while self.i < self.n and self.text[self.i].isspace():
            self.i += 1
        if self.peek() in ("=", ":"):
            self.i += 1
            self.skip_hspace()
        value = self.parse_value(f"key {key!r}")
        value.key_pos = self.pos(key_i)
        members[key] = value

    def parse_value_end(self) -> None:
        self.skip_hspace()
        if self.at_comment():
            self.skip_comment()
            return
        c = self.peek()
        if c in ("\n", "\r", ";", ","):
            self.i += 1
            return
        if c in ("", "}"):
            return
        raise self.error(f"expected a newline, ',' or ';' after the value, found {c!r}")

    def parse_value(self, what: str) -> Node:
        c = self.peek()
        start = self.i
        if c == "" or c in "\n\r]},;":
            raise self.error(f"expected a value for {what}, found {_show(c)}")
        if c == "[":
            return self.parse_array()
        if c == "{":
            return self.parse_map()
        if c == '"':
            return Node(self.read_dq_string(), self.pos(start))
        if c == "'":
            return Node(self.read_sq_string(), self.pos(start))
        if c == "(":
            return Node(self.read_paren_block(), self.pos(start))
        return self.parse_bare()

    def parse_array(self) -> Node:
        open_i = self.i
        self.i += 1
        self.enter()
        items: list[Node] = []
        while True:
            self.skip_blank()
            c = self.peek()
            if c == "":
                raise self.error(
                    f"expected ']' to close array opened at {self.pos(open_i).short()}"
                )
            if c == "]":
                self.i += 1
                break
            if c == ",":
                raise self.error("unexpected ',' in array: expected a value or ']'")
            items.append(self.parse_value("array element"))
            self.skip_hspace()
            if self.at_comment():
                self.skip_comment()
            c = self.peek()
            if c == "]":
                self.i += 1
                break
            if c in (",", "\n", "\r"):
                self.i += 1
                continue
            if c == "":
                raise self.error(
                    f"expected ']' to close array opened at {self.pos(open_i).short()}"
                )
            raise self.error(f"expected ',' or ']' after an array element, found {c!r}")
        self.depth -= 1
        return Node(items, self.pos(open_i))

    def parse_map(self) -> Node:
        open_i = self.i
        self.i += 1
        self.enter()
        members: dict[str, Node] = {}
        self.scopes.append(members)
        self.parse_body(members, open_i)
        self.scopes.pop()
        self.depth -= 1
        return Node(members, self.pos(open_i))

    # -- keys and strings ------------------------------------------------------------

    def read_bare_key(self) -> str:
        start = self.i
        while self.i < self.n:
            c = self.text[self.i]
            if c in _KEY_END or c.isspace():
                break
            self.i += 1
        return self.text[start : self.i]

    def read_quoted_key(self) -> str:
        quote, start = self.text[self.i], self.i
        end = self.text.find(quote, start + 1)
        if end < 0:
            raise self.error(f"unterminated quoted key: missing closing {quote}", start)
        self.i = end + 1
        return self.text[start + 1 : end]

    def read_sq_string(self) -> str:
        start = self.i
        end = self.text.find("'", start + 1)
        if end < 0:
            raise self.error("unterminated string: missing closing '", start)
        self.i = end + 1
        return self.text[start + 1 : end]

    def read_dq_string(self) -> str:
        start = self.i
        self.i += 1
        parts: list[str | bytes] = []
        while True:
            end = self._find_any('"\\')
            if end < 0:
                raise self.error('unterminated string: missing closing "', start)
            parts.append(self.text[self.i : end])
            self.i = end
            if self.text[end] == '"':
                self.i += 1
                return _join(parts)
            self.read_escape(parts, start)

    def _find_any(self, chars: str) -> int:
        found = [j for j in (self.text.find(c, self.i) for c in chars) if j >= 0]
        return min(found) if found else -1

    def read_escape(self, parts: list[str | bytes], string_start: int) -> None:
        """Consume a backslash escape at self.i into parts (bytes for \\xXX)."""
        esc_i = self.i
        c = self.peek(1)
        if c == "":
            raise self.error('unterminated string: missing closing "', string_start)
        if c in _ESCAPES:
            parts.append(_ESCAPES[c])
            self.i += 2
            return
        if c == "x":
            digits = self.text[self.i + 2 : self.i + 4]
            if len(digits) != 2 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(
                    f"expected two hexadecimal digits after '\\x', found {digits!r}", esc_i
                )
            parts.append(bytes([int(digits, 16)]))
            self.i += 4
            return
        raise self.error(
            f"invalid escape '\\{c}': only \\xXX, \\t, \\n, \\r, \\\" and \\\\ are allowed",
            esc_i,
        )

    def read_paren_block(self) -> str:
        """A ``(`` raw block that ends at a ``)`` alone on its own line."""
        start = self.i
        m = _PAREN_END_RE.search(self.text, start + 1)
        if m is None:
            raise self.error("unterminated '(' block: expected ')' alone on a line", start)
        self.i = m.start() + 2
        return self.text[start + 1 : m.start() + 1]

    # -- bare values, variables, includes ----------------------------------------------

    def parse_bare(self) -> Node:
        start = self.i
        if self.text.startswith("${", start):
            m = _BRACED_VAR_RE.match(self.text, start)
            if m is None or not m.group(1):
                raise self.error("expected a variable name and '}' after '${'", start)
            self.i = m.end()
            return self.resolve_variable(m.group(1), start)
        parts: list[str | bytes] = []
        escaped = False
        run_start = start
        while self.i < self.n:
            c = self.text[self.i]
            if c in _BARE_END:
                break
            if c == "\\":
                parts.append(self.text[run_start : self.i])
                self.read_escape(parts, start)
                run_start = self.i
                escaped = True
                continue
            self.i += 1
        parts.append(self.text[run_start : self.i])
        text = _join(parts)
        if escaped:
            return Node(text, self.pos(start), text=text)
        if text[:1] == "." or (text[:1] == "-" and not text[1:2].isdigit()):
            # nats-server refuses these too ("Floats must start with a digit").
            raise self.error(
                f"a bare value cannot start with {text[0]!r} unless it is a number: "
                f"quote it (\"{text}\")",
                start,
            )
        if text.startswith("$"):
            name = text[1:]
            if name.startswith(("2a$", "2b$", "2y$")):
                # An unquoted bcrypt hash, as nats-server special-cases.
                return Node(text, self.pos(start), text=text)
            if not name:
                raise self.error("expected a variable name after '$'", start)
            return self.resolve_variable(name, start)
        return self.classify(text, start)

    def classify(self, text: str, start: int) -> Node:
        pos = self.pos(start)
        lowered = text.lower()
        if lowered in _BOOLS:
            return Node(_BOOLS[lowered], pos, text=text)
        if _INT_RE.fullmatch(text):
            return Node(self.checked_int(int(text), text, start), pos, text=text)
        m = _SIZED_RE.fullmatch(text)
        if m is not None:
            mult = _SUFFIXES.get(m.group(2).lower())
            if mult is None:
                raise self.error(
                    f"invalid size suffix {m.group(2)!r} in {text!r}: expected one of "
                    "K, KB, KI, KIB, M, MB, MI, MIB, G, GB, ... (any case)",
                    start,
                )
            return Node(self.checked_int(int(m.group(1)) * mult, text, start), pos, text=text)
        if _FLOAT_RE.fullmatch(text):
            return Node(float(text), pos, text=text)
        if _DATE_RE.fullmatch(text):
            try:
                when = datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
            except ValueError:
                raise self.error(f"invalid datetime {text!r}", start) from None
            return Node(when, pos, text=text)
        return Node(text, pos, text=text)

    def checked_int(self, value: int, text: str, start: int) -> int:
        if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
            raise self.error(f"integer {text!r} is out of range", start)
        return value

    def resolve_variable(self, name: str, ref_i: int) -> Node:
        for scope in reversed(self.scopes):
            found = scope.get(name)
            if found is not None:
                found.used = True
                return Node(found.value, self.pos(ref_i), text=found.text)
        if name in self.env_refs:
            raise self.error(f"variable reference cycle for '${name}'", ref_i)
        raw = self.env.get(name)
        if raw is None:
            raise self.error(
                f"undefined variable '${name}': not defined in an enclosing block "
                "nor in the environment",
                ref_i,
            )
        if raw == "":
            return Node("", self.pos(ref_i), text="")
        if len(self.env_refs) >= MAX_ENV_DEPTH:
            raise self.error(f"environment variables nested too deeply at '${name}'", ref_i)
        self.env_refs.add(name)
        try:
            sub = _Parser(
                f"pk={raw}", f"<environment ${name}>", self.base_dir, self.env,
                self.includes, self.env_refs,
            )
            tree = sub.parse_document()
        except ConfigError as exc:
            raise self.error(
                f"environment variable '${name}' could not be parsed as a value: {exc.message}",
                ref_i,
            ) from None
        finally:
            self.env_refs.discard(name)
        node = tree.get("pk")
        if node is None:  # pragma: no cover - "pk=" always defines pk or fails
            raise self.error(f"environment variable '${name}' has no value", ref_i)
        return Node(node.value, self.pos(ref_i), text=node.text)

    def parse_include(self, members: dict[str, Node]) -> None:
        self.skip_hspace()
        c = self.peek()
        path_i = self.i
        if c in ("'", '"'):
            end = self.text.find(c, path_i + 1)
            if end < 0:
                raise self.error(f"unterminated include file name: missing closing {c}")
            name = self.text[path_i + 1 : end]
            self.i = end + 1
        elif c == "" or c in "\n\r[{(-\\" or c.isdigit():
            raise self.error(f"expected a file name after 'include', found {_show(c)}")
        else:
            while self.i < self.n and self.text[self.i] not in " \t\r\n;}":
                self.i += 1
            name = self.text[path_i : self.i]
        self.include_file(members, name, path_i)

    def include_file(self, members: dict[str, Node], name: str, path_i: int) -> None:
        if "\x00" in name:
            raise self.error("include file name contains a NUL character", path_i)
        target = Path(name)
        if not target.is_absolute():
            target = self.base_dir / target
        try:
            ident = os.path.realpath(target)
        except (OSError, ValueError) as exc:
            raise self.error(f"cannot include {name!r}: {exc}", path_i) from None
        if ident in self.includes:
            raise self.error(f"include cycle: {name!r} is already being read", path_i)
        if len(self.includes) >= MAX_INCLUDE_DEPTH:
            raise self.error(f"includes nested deeper than {MAX_INCLUDE_DEPTH} levels", path_i)
        try:
            text = read_source(target)
        except ConfigError as exc:
            raise self.error(f"cannot include {name!r}: {exc.message}", path_i) from None
        sub = _Parser(
            text, str(target), target.parent, self.env, (*self.includes, ident), self.env_refs
        )
        for key, node in sub.parse_document().items():
            members[key] = node


def _join(parts: list[str | bytes]) -> str:
    """Join string pieces; runs of \\xXX bytes are decoded as UTF-8, as Go strings would be."""
    if all(isinstance(p, str) for p in parts):
        return "".join(p for p in parts if isinstance(p, str))
    out: list[str] = []
    run = bytearray()
    for part in parts:
        if isinstance(part, bytes):
            run += part
            continue
        if not part:
            continue  # an empty piece between two \xXX escapes must not split the run
        if run:
            out.append(run.decode("utf-8", errors="replace"))
            run = bytearray()
        out.append(part)
    if run:
        out.append(run.decode("utf-8", errors="replace"))
    return "".join(out)


def read_source(path: Path) -> str:
    """The text of a config file; ConfigError (without position) when unreadable."""
    try:
        if not path.exists():
            raise ConfigError("no such file", file=str(path))
        if not path.is_file():
            raise ConfigError("not a regular file", file=str(path))
        if path.stat().st_size > MAX_SOURCE_BYTES:
            raise ConfigError(f"larger than {MAX_SOURCE_BYTES} bytes", file=str(path))
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(exc.strerror or str(exc), file=str(path)) from None
    except ValueError as exc:  # e.g. a NUL in the name
        raise ConfigError(str(exc), file=repr(str(path))) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not valid UTF-8 (byte {exc.start})", file=str(path)) from None


def parse_tree(
    text: str,
    filename: str = "<string>",
    *,
    base_dir: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Node]:
    """Parse config text into positioned nodes.

    Includes resolve against ``base_dir``, by default the directory of ``filename``
    (or the working directory for a name in angle brackets such as "<string>").
    """
    if base_dir is None:
        base_dir = Path.cwd() if filename.startswith("<") else Path(filename).parent
    parser = _Parser(
        text, filename, Path(base_dir), os.environ if env is None else env, (), set()
    )
    return parser.parse_document()


def parse_file_tree(path: str | Path, *, env: Mapping[str, str] | None = None) -> dict[str, Node]:
    p = Path(path)
    text = read_source(p)
    parser = _Parser(
        text, str(p), p.parent, os.environ if env is None else env,
        (os.path.realpath(p),), set(),
    )
    return parser.parse_document()


def to_plain(value: Any) -> Any:
    """Strip positions: nodes become plain dicts, lists and scalars."""
    if isinstance(value, Node):
        value = value.value
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    return value
