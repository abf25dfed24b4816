"""format_time: Go's RFC3339Nano in UTC, also when consecutive calls share a second (the
last second is remembered) or do not."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from jetraft.jetstream.models import ZERO_TIME, format_time


def reference(ns: int) -> str:
    if ns <= 0:
        return ZERO_TIME
    secs, frac = divmod(ns, 10**9)
    text = datetime.fromtimestamp(secs, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + "Z"


@given(st.lists(st.integers(-5, 4_000_000_000 * 10**9), max_size=20), st.integers(0, 10**9))
def test_matches_the_reference_in_any_order(times: list[int], step: int) -> None:
    for ns in times:
        for t in (ns, ns + step, ns):  # same second or the next, then back
            assert format_time(t) == reference(t)


def test_examples() -> None:
    assert format_time(1_700_000_000_000_000_000) == "2023-11-14T22:13:20Z"
    assert format_time(1_700_000_000_120_000_000) == "2023-11-14T22:13:20.12Z"
    assert format_time(1_700_000_000_000_000_001) == "2023-11-14T22:13:20.000000001Z"
    assert format_time(0) == ZERO_TIME


@given(
    st.integers(1, 4_000_000_000),
    st.one_of(
        st.integers(0, 10**9 - 1),
        st.sampled_from([1, 10, 99_999_999, 100_000_000, 100_000_001, 999_999_990, 10**9 - 1]),
        st.integers(1, 10**8).map(lambda n: n * 10),  # trailing zeros
    ),
)
def test_fractions_around_the_nine_digit_shortcut(secs: int, frac: int) -> None:
    """Nine-digit fractions without a trailing zero are written as they are, the others
    padded and cut: both as the reference writes them."""
    ns = secs * 10**9 + frac
    assert format_time(ns) == reference(ns)
