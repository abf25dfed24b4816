"""The NATS config syntax: every form the lexer accepts, and where errors point."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from jetraft.config import ConfigError, parse_raw, parse_tree


def raw(text: str, **env: str) -> dict[str, object]:
    from jetraft.config.syntax import to_plain

    return to_plain(parse_tree(text, "t.conf", env=env))  # type: ignore[no-any-return]


def error_of(text: str, **env: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_tree(text, "bad.conf", env=env)
    return info.value


# -- assignments, blocks, arrays, comments ---------------------------------------------------


def test_three_separators_and_optional_terminators() -> None:
    assert raw("a = 1\nb: 2\nc 3\nd=4; e=5, f=6") == {
        "a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6,
    }


def test_blocks_with_and_without_separator() -> None:
    text = (
        "jetstream {\n  store_dir: /x\n}\ncluster: { name: C1 }\nauth = {user: a}\n"
        "nested{a{b{c: 1}}}"
    )
    assert raw(text) == {
        "jetstream": {"store_dir": "/x"},
        "cluster": {"name": "C1"},
        "auth": {"user": "a"},
        "nested": {"a": {"b": {"c": 1}}},
    }


def test_block_on_the_next_line_as_nats_server_allows() -> None:
    assert raw("jetstream\n{\n  max_mem: 1\n}\n") == {"jetstream": {"max_mem": 1}}


def test_arrays_by_commas_newlines_trailing_comma_and_nesting() -> None:
    text = """
routes: [
  nats://a:6222
  nats://b:6222, nats://c:6222,
]
empty: []
nested: [[1, 2], [], ["x"]]
"""
    assert raw(text) == {
        "routes": ["nats://a:6222", "nats://b:6222", "nats://c:6222"],
        "empty": [],
        "nested": [[1, 2], [], ["x"]],
    }


def test_maps_inside_arrays() -> None:
    text = 'users = [ {user: a, password: b}, {user: "c", pass: "d"}\n {user: e} ]'
    assert raw(text) == {
        "users": [{"user": "a", "password": "b"}, {"user": "c", "pass": "d"}, {"user": "e"}]
    }


def test_comments_everywhere() -> None:
    text = """# top comment
// slash comment
a = 1 # after a value
b = [ # after bracket
  1 // after element
  # own line
  2
]
c { # after brace
  d: x // trailing
}
url = http://x.example/path  # '//' inside a bare value is not a comment
"""
    assert raw(text) == {"a": 1, "b": [1, 2], "c": {"d": "x"}, "url": "http://x.example/path"}


def test_whole_document_may_be_wrapped_in_braces() -> None:
    assert raw('{\n  "port": 4222,\n  "debug": true\n}\n') == {"port": 4222, "debug": True}


def test_quoted_keys_and_dollar_keys() -> None:
    text = "\"my key\": 1\n'other key' = 2\naccounts { $SYS { users = [] } }"
    assert raw(text) == {"my key": 1, "other key": 2, "accounts": {"$SYS": {"users": []}}}


def test_later_duplicate_key_wins() -> None:
    assert raw("a = 1\na = 2") == {"a": 2}


# -- scalars -------------------------------------------------------------------------------


def test_strings_quoted_and_bare() -> None:
    text = r"""
dq = "a \"q\" \\ \t\n\x41\xc3\xa9"
sq = 'raw \t $VAR "x"'
bare = localhost:6222
route = nats-route://host_b:6222
ip = 0.0.0.0:6222
rand = 127.0.0.1:-1
ipv6 = "[::1]:4222"
path = /nats/storage
hash = #not-a-comment
"""
    assert raw(text) == {
        "dq": 'a "q" \\ \t\nAé',
        "sq": 'raw \\t $VAR "x"',
        "bare": "localhost:6222",
        "route": "nats-route://host_b:6222",
        "ip": "0.0.0.0:6222",
        "rand": "127.0.0.1:-1",
        "ipv6": "[::1]:4222",
        "path": "/nats/storage",
        "hash": "#not-a-comment",
    }


def test_bare_strings_take_escapes_like_nats_server() -> None:
    assert raw(r"a = x\ty") == {"a": "x\ty"}


def test_booleans_any_case() -> None:
    text = "a=true\nb=FALSE\nc=yes\nd=No\ne=on\nf=OFF"
    assert raw(text) == {"a": True, "b": False, "c": True, "d": False, "e": True, "f": False}


def test_integers_floats_and_dates() -> None:
    assert raw("a = 42\nb = -7\nc = 0.5\nd = -2.25\ne = 2016-05-04T18:53:41Z") == {
        "a": 42, "b": -7, "c": 0.5, "d": -2.25,
        "e": datetime(2016, 5, 4, 18, 53, 41, tzinfo=UTC),
    }


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1k", 1000), ("1K", 1000), ("1kb", 1024), ("1KB", 1024), ("1Ki", 1024),
        ("1KiB", 1024), ("2m", 2_000_000), ("2MB", 2 * 1024**2), ("8mib", 8 * 1024**2),
        ("3g", 3 * 10**9), ("3GB", 3 * 1024**3), ("1T", 10**12), ("1tb", 1024**4),
        ("1P", 10**15), ("1pib", 1024**5), ("1e", 10**18), ("-1K", -1000),
    ],
)
def test_size_suffixes_follow_nats_server(text: str, value: int) -> None:
    # nats-server: a bare k/m/g is decimal, kb/ki/kib (any case) binary.
    assert raw(f"n = {text}") == {"n": value}


def test_words_that_merely_start_with_digits_are_strings() -> None:
    assert raw("a = 10s\nb = 500ms\nc = 1h30m\nd = 4222abc\ne = 1.2.3") == {
        "a": "10s", "b": "500ms", "c": "1h30m", "d": "4222abc", "e": "1.2.3",
    }


def test_paren_block_is_a_raw_multiline_string() -> None:
    assert raw("cert = (\nline one\n  line two\n)\nafter = 1\n") == {
        "cert": "\nline one\n  line two\n", "after": 1,
    }


# -- variables --------------------------------------------------------------------------------


def test_variables_from_any_enclosing_scope() -> None:
    text = """
PORT = 4333
NAME: "srv"
listen: $PORT
outer {
  inner_var = 5
  deep { a: $inner_var, b: $NAME, c: ${PORT} }
  list = [$PORT, {x: $NAME}]
}
"""
    tree = raw(text)
    assert tree["listen"] == 4333
    assert tree["outer"] == {
        "inner_var": 5, "deep": {"a": 5, "b": "srv", "c": 4333}, "list": [4333, {"x": "srv"}],
    }


def test_innermost_definition_shadows_outer() -> None:
    assert raw("v = 1\nb { v = 2, x = $v }\ny = $v") == {"v": 1, "b": {"v": 2, "x": 2}, "y": 1}


def test_variable_referring_to_a_block() -> None:
    assert raw("perms = {publish: \"a.>\"}\nu = $perms") == {
        "perms": {"publish": "a.>"}, "u": {"publish": "a.>"},
    }


def test_environment_variables_are_parsed_as_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JR_TEST_PORT", "4555")
    monkeypatch.setenv("JR_TEST_HOST", "127.0.0.1:6222")
    monkeypatch.setenv("JR_TEST_SIZE", "2MB")
    monkeypatch.setenv("JR_TEST_CHAIN", "$JR_TEST_PORT")
    tree = parse_raw(
        "port: $JR_TEST_PORT\nh: $JR_TEST_HOST\ns: ${JR_TEST_SIZE}\nc: $JR_TEST_CHAIN"
    )
    assert tree == {"port": 4555, "h": "127.0.0.1:6222", "s": 2 * 1024**2, "c": 4555}


def test_file_definitions_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JR_TEST_X", "from-env")
    assert parse_raw("JR_TEST_X = from-file\nv = $JR_TEST_X") == {
        "JR_TEST_X": "from-file", "v": "from-file",
    }


def test_quoted_strings_and_bcrypt_hashes_are_never_expanded() -> None:
    text = (
        'a = "$NOPE"\nb = \'${NOPE}\'\n'
        "c = $2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm"
    )
    assert raw(text) == {
        "a": "$NOPE", "b": "${NOPE}",
        "c": "$2a$11$DRh4C0KNbNnD8K/hb/buWe1zPxEHrLEiDmuq1Mi0rRJiH/W25Qidm",
    }


def test_used_definitions_are_marked() -> None:
    tree = parse_tree("A = 1\nB = 2\nc = $A", env={})
    assert tree["A"].used and not tree["B"].used


def test_undefined_variable_is_an_error_at_the_reference() -> None:
    err = error_of("a = 1\nb {\n  c:   $MISSING_VAR_X\n}")
    assert (err.line, err.column) == (3, 8)
    assert "undefined variable '$MISSING_VAR_X'" in str(err)
    assert str(err).startswith("bad.conf:3:8: ")


def test_environment_reference_cycle_is_an_error() -> None:
    err = error_of("a = $JR_A", JR_A="$JR_B", JR_B="$JR_A")
    assert "cycle" in err.message and (err.line, err.column) == (1, 5)


def test_unparsable_environment_value_is_an_error() -> None:
    err = error_of("a = $JR_BAD", JR_BAD="x y")
    assert "environment variable '$JR_BAD'" in err.message


def test_empty_environment_value_is_an_empty_string() -> None:
    assert raw("a = $JR_EMPTY", JR_EMPTY="") == {"a": ""}


# -- includes -----------------------------------------------------------------------------------


def test_include_is_relative_to_the_including_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "auth.conf").write_text("users = [ {user: a, password: b} ]\n")
    (tmp_path / "sub" / "main.conf").write_text(
        "port: 1\nauthorization {\n  include ./auth.conf\n  timeout: 2\n}\ninclude 'tail.conf'\n"
    )
    (tmp_path / "sub" / "tail.conf").write_text("debug: true\nX = 7\n")
    from jetraft.config import parse_file_tree, to_plain

    tree = to_plain(parse_file_tree(tmp_path / "sub" / "main.conf", env={}))
    assert tree == {
        "port": 1,
        "authorization": {"users": [{"user": "a", "password": "b"}], "timeout": 2},
        "debug": True,
        "X": 7,
    }


def test_variables_defined_by_an_include_are_visible_after_it(tmp_path: Path) -> None:
    (tmp_path / "vars.conf").write_text("SHARED_PORT = 4999\n")
    tree = parse_tree('include "vars.conf"\nport: $SHARED_PORT', str(tmp_path / "m.conf"), env={})
    assert tree["port"].value == 4999


def test_error_inside_an_include_names_that_file(tmp_path: Path) -> None:
    (tmp_path / "broken.conf").write_text("a = 1\nb = [1, 2\n")
    with pytest.raises(ConfigError) as info:
        parse_tree("include broken.conf\n", str(tmp_path / "main.conf"), env={})
    assert info.value.file.endswith("broken.conf")
    assert info.value.line == 3


def test_include_of_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        parse_tree("a = 1\n  include ./nope.conf\n", str(tmp_path / "main.conf"), env={})
    err = info.value
    assert (err.file, err.line, err.column) == (str(tmp_path / "main.conf"), 2, 11)
    assert "cannot include './nope.conf': no such file" in err.message


def test_include_cycle_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.conf").write_text("include b.conf\n")
    (tmp_path / "b.conf").write_text("include a.conf\n")
    from jetraft.config import parse_file_tree

    with pytest.raises(ConfigError, match="include cycle"):
        parse_file_tree(tmp_path / "a.conf", env={})


def test_include_key_with_separator_is_an_ordinary_key() -> None:
    # As in nats-server: only "include" followed by whitespace is the directive.
    assert raw("include=5") == {"include": 5}
    assert raw("include: 6") == {"include": 6}


# -- errors and their positions -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "col", "fragment"),
    [
        # unclosed block: reported at end of file, naming where it opened
        ("listen: 4222\ncluster {\n  name: C1\n", 4, 1,
         "expected '}' to close block opened at 2:9"),
        ("a {\n  b {\n    c: 1\n  }\n", 5, 1, "block opened at 1:3"),
        # unclosed array
        ("routes: [\n  a\n  b\n", 4, 1, "expected ']' to close array opened at 1:9"),
        ("r = [a, b", 1, 10, "expected ']' to close array opened at 1:5"),
        # unclosed quotes: reported at the opening quote
        ('a = 1\nname: "abc\n', 2, 7, 'unterminated string: missing closing "'),
        ("name: 'abc", 1, 7, "unterminated string: missing closing '"),
        ('"key: 1', 1, 1, "unterminated quoted key"),
        # bad number suffix
        ("max_payload: 1KBB\n", 1, 14, "invalid size suffix 'KBB'"),
        ("a = 1\nb = 12mbi", 2, 5, "invalid size suffix 'mbi'"),
        # missing values and separators
        ("a = \n", 1, 5, "expected a value for key 'a', found newline"),
        ("a", 1, 2, "expected a value for key 'a', found end of file"),
        ("a { b }", 1, 7, "expected a value for key 'b', found '}'"),
        ("a = 1 2", 1, 7, "expected a newline, ',' or ';' after the value, found '2'"),
        ("r = [1 2]", 1, 8, "expected ',' or ']' after an array element"),
        ("r = [1,,2]", 1, 8, "unexpected ',' in array"),
        ("= 1", 1, 1, "unexpected key separator '='"),
        ("a = 1\n}\n", 2, 1, "unexpected '}': no block is open"),
        ('s = "bad \\q escape"', 1, 10, "invalid escape '\\q'"),
        ('s = "\\xZZ"', 1, 6, "expected two hexadecimal digits"),
        ("p = ./data", 1, 5, "cannot start with '.'"),
        ("n = 99999999999999999999", 1, 5, "out of range"),
        ("v = ${", 1, 5, "expected a variable name"),
        ("v = $", 1, 5, "expected a variable name after '$'"),
        ("c = (\nabc\n", 1, 5, "unterminated '(' block"),
        ("{ a: 1 } b", 1, 10, "after the '}' that closes the top-level block"),
        ("x = 1\ninclude\n", 2, 8, "expected a file name after 'include', found newline"),
        ("include [a]", 1, 9, "expected a file name after 'include'"),
    ],
)
def test_errors_point_at_line_and_column(text: str, line: int, col: int, fragment: str) -> None:
    err = error_of(text)
    assert fragment in err.message, err.message
    assert (err.line, err.column) == (line, col), str(err)
    assert str(err) == f"bad.conf:{line}:{col}: {err.message}"


def test_columns_count_characters_not_bytes() -> None:
    err = error_of('name = "ünïcödé"\nb = "x')
    assert (err.line, err.column) == (2, 5)
    err = error_of('name = "ünïcödé" 2')
    assert err.column == 18


def test_deep_nesting_is_refused_not_a_crash() -> None:
    err = error_of("a = " + "[" * 500)
    assert "nested deeper" in err.message


def test_crlf_line_endings() -> None:
    assert raw("a = 1\r\nb {\r\n  c: x\r\n}\r\nd = [1\r\n2]\r\n") == {
        "a": 1, "b": {"c": "x"}, "d": [1, 2],
    }


def test_include_name_with_nul_is_an_error_not_a_crash() -> None:
    # Found by the fuzz test: os.path.realpath raised ValueError.
    err = error_of("include \x00")
    assert "NUL" in err.message and (err.line, err.column) == (1, 9)
