"""``mappings {}`` in the config: the values built, and nats-server's errors at the place
in the file (texts checked against ``nats-server -t`` on the same files)."""

from __future__ import annotations

import pytest

from jetraft.config import ConfigError, parse_config
from jetraft.config.model import MappingDestination, SubjectMapping
from jetraft.server.core.mappings import build_mapper, check_mappings


def test_top_level_and_account_mappings() -> None:
    cfg = parse_config(
        'mappings {\n  "a.*": "b.$1"\n  "w": [{destination: "w.1", weight: 40%},'
        ' {dest: "w.2", weight: 60, cluster: "c1"}]\n}\n'
        'accounts { A { users [{user: a, password: a}], maps { x: {destination: y, weight: 100}'
        " } } }\n",
        "m.conf",
    )
    assert cfg.mappings == (
        SubjectMapping("a.*", (MappingDestination("b.$1"),), single=True),
        SubjectMapping("w", (MappingDestination("w.1", 40), MappingDestination("w.2", 60, "c1"))),
    )
    assert cfg.account("A").mappings == (SubjectMapping("x", (MappingDestination("y"),)),)  # type: ignore[union-attr]
    assert cfg.mappings[0].pos is not None and cfg.mappings[0].pos.line == 2
    check_mappings(cfg)
    m = build_mapper(cfg.mappings)
    assert m is not None and m.map("a.q") == "b.q"
    assert not any("mappings" in w for w in cfg.warnings)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('mappings {\n "a.*": "b.$2" }', 2,
         'Error adding mapping for "a.*" to "b.$2" : invalid mapping destination: '
         "wildcard index out of range in $2: [2]"),
        ('mappings {\n "a.*": [{destination: "b.$1", weight: 60%},'
         ' {destination: "c.$1", weight: 50}] }', 2,
         'Error adding mapping for "a.*" : total weight needs to be <= 100'),
        ('mappings {\n "a..b": "c" }', 2, 'Subject "a..b" is not a valid subject'),
        ('mappings {\n "a": [{destination: "b", weight: 150}] }', 2,
         "Invalid weight 150 for mapping destination"),
        ('mappings {\n "a": [{destination: "b"}] }', 2,
         'Missing weight for mapping destination "b"'),
        ('mappings {\n "a": [{destination: "b", weight: 10, foo: 1}] }', 2,
         'Unknown field "foo" for mapping destination'),
        ('mappings {\n "a": [{destination: "b", weight: 10}, {destination: "b", weight: 10}] }',
         2, 'Error adding mapping for "a" : duplicate entry for "b"'),
        ('accounts { A {\n users [{user: a, password: a}],\n mappings { "x.*": "y.{{nope(1)}}" }'
         " } }", 3,
         'Error adding mapping for "x.*" to "y.{{nope(1)}}" : invalid mapping destination: '
         "unknown function in {{nope(1)}}"),
        ('mappings {\n "a": [{destination: "b", weight: "x%"}] }', 2,
         'Invalid weight "x" for mapping destination'),
        ('mappings {\n "a": 5 }', 2, "Expected an entry for the mapping destination"),
    ],
)
def test_errors_name_the_place(text: str, line: int, message: str) -> None:
    with pytest.raises(ConfigError) as exc:
        check_mappings(parse_config(text, "bad.conf"))
    assert exc.value.message == message
    assert exc.value.file == "bad.conf" and exc.value.line == line
    assert str(exc.value).startswith(f"bad.conf:{line}:")
