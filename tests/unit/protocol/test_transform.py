"""Subject transforms: nats-server's mapping language, its results and its refusals."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jetraft.protocol.subjects import is_valid_subject, subject_matches
from jetraft.protocol.transform import (
    SubjectTransform,
    TransformError,
    fnv1a_32,
    validate_mapping,
)


def tr(src: str, dest: str, strict: bool = False) -> SubjectTransform:
    t = SubjectTransform.create(src, dest, strict)
    assert t is not None
    return t


@pytest.mark.parametrize(
    ("src", "dest", "subject", "expected"),
    [
        ("", "prefix.>", "foo", "prefix.foo"),
        ("foo", "bar", "foo", "bar"),
        ("foo.*.bar.*.baz", "req.$2.$1", "foo.A.bar.B.baz", "req.B.A"),
        ("foo.*.bar.*.baz", "req.{{wildcard(2)}}.{{wildcard(1)}}", "foo.A.bar.B.baz", "req.B.A"),
        ("foo.*.bar.*.baz", "req.{{ Wildcard (2) }}.$1", "foo.A.bar.B.baz", "req.B.A"),
        ("baz.>", "my.pre.>", "baz.1.2.3", "my.pre.1.2.3"),
        ("baz.*.>", "x.$1.>", "baz.1.2.3", "x.1.2.3"),
        (">", "transformed.>", "test", "transformed.test"),
        ("*", "foo.bar.$1", "foo", "foo.bar.foo"),
        ("*", "{{splitfromleft(1,3)}}", "12345", "123.45"),
        ("*", "{{SplitFromRight(1,3)}}", "12345", "12.345"),
        ("*", "{{splitfromleft(1,9)}}", "12345", "12345"),
        ("*", "{{SliceFromLeft(1,3)}}", "1234567890", "123.456.789.0"),
        ("*", "{{SliceFromRight(1,3)}}", "1234567890", "1.234.567.890"),
        ("*", "{{slicefromleft(1,5)}}", "12345", "12345"),
        ("*", "{{split(1,-)}}", "-abc-def--ghi-", "abc.def.ghi"),
        ("*", "{{split(1,-)}}", "abc-def--ghi-", "abc.def.ghi"),
        ("*.*", "{{split(2,-)}}.{{splitfromleft(1,2)}}", "foo.-abc-def--ghij-",
         "abc.def.ghij.fo.o"),
        ("*", "{{right(1,1)}}", "1234", "4"),
        ("*", "{{right(1,3)}}", "1234", "234"),
        ("*", "{{right(1,6)}}", "1234", "1234"),
        ("*", "{{left(1,1)}}", "1234", "1"),
        ("*", "{{left(1,3)}}", "1234", "123"),
        ("*", "{{left(1,6)}}", "1234", "1234"),
        # Partitions: nats-server's numbers for the same inputs.
        ("*", "bar.{{partition(0)}}", "baz", "bar.0"),
        ("*", "bar.{{partition(10, 0)}}", "foo", "bar.3"),
        ("*.*", "bar.{{partition(10)}}", "foo.bar", "bar.6"),
        ("*", "bar.{{partition(10)}}", "foo", "bar.3"),
        ("*", "bar.{{partition(10)}}", "baz", "bar.0"),
        ("*", "bar.{{partition(10)}}", "qux", "bar.9"),
        ("foo.bar", "baz.{{partition(10)}}", "foo.bar", "baz.6"),
        ("foo.baz", "qux.{{partition(10)}}", "foo.baz", "qux.4"),
        ("test.subject", "result.{{partition(5)}}", "test.subject", "result.0"),
        ("*", "bar.{{random(0)}}", "qux", "bar.0"),
        ("$foo.*", "$bar.$1", "$foo.x", "$bar.x"),  # '$' tokens that are not $N are literals
    ],
)
def test_matches_like_nats_server(src: str, dest: str, subject: str, expected: str) -> None:
    assert tr(src, dest).match(subject) == expected


def test_partition_over_several_wildcards_concatenates_them() -> None:
    t = tr("a.*.*", "p.{{partition(7,1,2)}}.$1.$2")
    got = t.match("a.x.yz")
    assert got == f"p.{fnv1a_32(b'xyz') % 7}.x.yz"


def test_fnv1a_known_values() -> None:
    # Reference values of 32-bit FNV-1a.
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32(b"a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968


def test_random_uses_the_injected_generator() -> None:
    t = tr("*", "bar.{{random(6)}}")
    seen = {t.match("qux", random.Random(seed)) for seed in range(60)}
    assert seen == {f"bar.{i}" for i in range(6)}
    assert t.match("qux", random.Random(5)) == t.match("qux", random.Random(5))


def test_non_matching_and_invalid_subjects_give_none() -> None:
    t = tr("foo.*", "bar.$1")
    assert t.match("baz.x") is None
    assert t.match("foo.x.y") is None
    assert t.match("foo.*") is None
    assert t.match("foo..x") is None
    # '>' to '>' is the identity.
    assert tr(">", ">").match("any.thing") == "any.thing"


def test_empty_destination_is_no_transform() -> None:
    assert SubjectTransform.create("foo", "") is None


def _err(src: str, dest: str, strict: bool = False) -> str:
    with pytest.raises(TransformError) as exc:
        SubjectTransform.create(src, dest, strict)
    return str(exc.value)


def test_refusals_with_nats_server_texts() -> None:
    d = "invalid mapping destination"
    assert _err("foo..", "bar") == "invalid subject"
    assert _err("foo.*", "bar.*") == "invalid subject"
    assert _err("foo.*", "bar.$1.>") == "invalid subject"
    assert _err("foo.>", "bar.baz") == "invalid subject"
    assert _err("", "bar") == "invalid subject"  # an empty source is '>'
    assert _err("foo.*", "bar.$2") == f"{d}: wildcard index out of range in $2: [2]"
    assert _err("foo.*.*", "bar.$2", strict=True) == (
        f"{d}: not using all of the token wildcard(s) in bar.$2"
    )
    assert _err("foo.*", "foo.$foo", strict=True) == (
        f"{d}: not using all of the token wildcard(s) in foo.$foo"
    )
    assert _err("foo.*", "bar.{{Partition(2,1)}}", strict=True) == (
        f"{d}: the only mapping function allowed for import transforms is {{{{Wildcard()}}}}"
        " in {{Partition(2,1)}}"
    )
    assert _err("foo.*", "foo.{{wildcard(2)}}") == (
        f"{d}: wildcard index out of range in {{{{wildcard(2)}}}}: [2]"
    )
    assert _err("foo.*", "foo.{{unimplemented(1)}}") == (
        f"{d}: unknown function in {{{{unimplemented(1)}}}}"
    )
    args = "function argument is invalid or in the wrong format"
    assert _err("foo.*", "foo.{{partition()}}") == f"{d}: {args} in {{{{partition()}}}}"
    assert _err("foo.*", "foo.{{random()}}") == f"{d}: {args} in {{{{random()}}}}"
    assert _err("foo.*", "foo.{{wildcard(foo)}}") == f"{d}: {args} in {{{{wildcard(foo)}}}}"
    assert _err("foo.*", "foo.{{wildcard()}}") == (
        f"{d}: not enough arguments passed to the function in {{{{wildcard()}}}}"
    )
    assert _err("foo.*", "foo.{{wildcard(1,2)}}") == (
        f"{d}: too many arguments passed to the function in {{{{wildcard(1,2)}}}}"
    )
    assert _err("foo.*", "foo.{{ wildcard5) }}").endswith("unknown function in {{ wildcard5) }}")
    assert _err("foo.*", "foo.{{splitLeft(2,2}}").endswith("unknown function in {{splitLeft(2,2}}")
    assert _err("foo", "bla.{{wildcard(1)}}") == (
        f"{d}: wildcard index out of range in {{{{wildcard(1)}}}}"
    )
    assert _err("foo.*", f"foo.{{{{partition({2**31})}}}}").startswith(f"{d}: {args}")
    assert _err("foo.*", f"foo.{{{{random({2**31})}}}}").startswith(f"{d}: {args}")
    assert _err("*", "{{split(1,a b)}}").startswith(f"{d}: {args}")
    assert _err("*", "{{splitfromleft(1)}}").startswith(f"{d}: not enough arguments")
    assert _err("*", "{{splitfromleft(1,2,3)}}").startswith(f"{d}: too many arguments")
    assert _err("*", f"{{{{left(1,{2**31})}}}}").startswith(f"{d}: {args}")


@pytest.mark.parametrize(
    ("src", "dest", "strict"),
    [
        ("foo.*", "bar.{{Wildcard(1)}}", True),
        ("foo.*.*", "bar.$2", False),
        ("foo.*.*", "bar.{{wildcard(1)}}", False),
        ("foo.*.*", "bar.{{partition(1)}}", False),
        ("foo.*.*", "bar.{{random(5)}}", False),
        ("foo", "bar", False),
        ("baz.>", "mybaz.>", False),
        ("*", "{{splitfromleft(1,1)}}", False),
        ("", "prefix.>", False),
        ("*.*", "{{partition(10,1,2)}}", False),
        ("foo.*.*", "foo.{{wildcard(1)}}.{{wildcard(2)}}.{{partition(5,1,2)}}", False),
        ("foo.*", f"foo.{{{{partition({2**31 - 1})}}}}", False),
        ("foo.bar", f"foo.{{{{random({2**31 - 1})}}}}", False),
    ],
)
def test_accepted_like_nats_server(src: str, dest: str, strict: bool) -> None:
    assert SubjectTransform.create(src, dest, strict) is not None


def test_validate_mapping() -> None:
    d = "invalid mapping destination"
    validate_mapping("foo", "")
    validate_mapping(">", "transformed.>")
    cases = {
        "a..b": f"{d}: invalid transform",
        "a.>.b": f"{d}: invalid transform in b",
        "a.b c": f"{d}: invalid transform",
        # left/right compile, but the mapping check does not know them (as nats-server).
        "{{left(1,2)}}": f"{d}: unknown function in {{{{left(1,2)}}}}",
        "{{nope(1)}}": f"{d}: unknown function in {{{{nope(1)}}}}",
        "x.$2": f"{d}: wildcard index out of range in $2: [2]",
    }
    for dest, text in cases.items():
        with pytest.raises(TransformError) as exc:
            validate_mapping("a.*", dest)
        assert str(exc.value) == text, dest


_token = st.text(alphabet="abcxyz0123-_", min_size=1, max_size=8)


@given(st.lists(_token, min_size=1, max_size=6), st.integers(1, 50))
def test_partition_in_range_and_stable(tokens: list[str], n: int) -> None:
    t = tr(">", f"p.{{{{partition({n})}}}}.>")
    subject = ".".join(tokens)
    got = t.match(subject)
    assert got is not None
    head, part, rest = got.split(".", 2)
    assert head == "p" and 0 <= int(part) < n and rest == subject
    assert int(part) == fnv1a_32(subject.encode()) % n


@given(st.lists(_token, min_size=2, max_size=5))
def test_reordering_wildcards_round_trips(tokens: list[str]) -> None:
    n = len(tokens)
    src = ".".join(["*"] * n)
    backwards = ".".join(f"${i}" for i in range(n, 0, -1))
    there = tr(src, backwards, strict=True)
    subject = ".".join(tokens)
    out = there.match(subject)
    assert out is not None and out == ".".join(reversed(tokens))
    assert there.match(out) == subject


@given(_token, st.integers(1, 9))
def test_slices_keep_every_character(token: str, size: int) -> None:
    for fn in ("slicefromleft", "slicefromright", "splitfromleft", "splitfromright"):
        got = tr("*", f"{{{{{fn}(1,{size})}}}}").match(token)
        assert got is not None and got.replace(".", "") == token
        if "slice" in fn:
            pieces = got.split(".")
            assert all(len(p) <= size for p in pieces)


@given(st.lists(_token, min_size=1, max_size=5), _token)
def test_output_of_a_prefix_transform_is_a_valid_matching_subject(
    tokens: list[str], prefix: str
) -> None:
    subject = ".".join(tokens)
    got = tr(">", f"{prefix}.>").match(subject)
    assert got == f"{prefix}.{subject}"
    assert is_valid_subject(got) and subject_matches(f"{prefix}.>", got)
