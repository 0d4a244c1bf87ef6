"""The local token estimate and its per-model calibration."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frontdesk.errors import ConfigError
from frontdesk.threads.tokens import (
    MESSAGE_OVERHEAD,
    CalibratedCounter,
    EstimatingCounter,
    TokenCounter,
    _ceil,
    _estimate,
    count_each,
    count_groups,
    count_text_groups,
)


def test_estimate_is_close_to_chars_over_four_for_english() -> None:
    text = (
        "Hi, I'm Priya. My order 88213, placed on 3 March, arrived 40 minutes late and I was"
        " told the delivery fee would be refunded."
    )
    tokens = EstimatingCounter().count(text)
    # A BPE tokenizer gives about 32 tokens here; the estimate may over-count, not under.
    assert 30 <= tokens <= 50
    assert tokens >= len(text) / 5


def test_estimate_counts_numbers_punctuation_and_non_ascii() -> None:
    counter = EstimatingCounter()
    assert counter.count("") == 0
    assert counter.count("123456789") == 3
    assert counter.count("!!!") == 3
    assert counter.count("日本語") == 3
    assert counter.count("potatoes") == 2


@given(st.text(max_size=300), st.text(max_size=300))
def test_appending_text_never_makes_it_cheaper(a: str, b: str) -> None:
    counter = EstimatingCounter()
    # Appending text never makes a message cheaper, so budgets cut in the right direction.
    assert counter.count(a + " " + b) >= max(counter.count(a), counter.count(b)) - 1
    assert counter.count(a) >= 0


def test_count_messages_adds_framing() -> None:
    counter = EstimatingCounter()
    messages = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    assert counter.count_messages(messages) == 2 * MESSAGE_OVERHEAD + 2 + 1
    assert isinstance(counter, TokenCounter)


def test_calibrated_counter_learns_a_denser_tokenizer_at_once() -> None:
    counter = CalibratedCounter(margin=0.0)
    assert counter.count("abcd" * 100, model="m") == 100
    counter.observe("m", estimated=100, exact=130)
    assert counter.ratio("m") == pytest.approx(1.3)
    assert counter.count("abcd" * 100, model="m") == 130
    # Other models are untouched.
    assert counter.count("abcd" * 100, model="other") == 100


def test_calibrated_counter_falls_slowly_so_it_errs_on_over_count() -> None:
    counter = CalibratedCounter(margin=0.0, decay=0.1)
    counter.observe("m", estimated=100, exact=150)
    counter.observe("m", estimated=100, exact=100)
    assert counter.ratio("m") == pytest.approx(1.45)
    assert counter.observations("m") == 2


def test_calibrated_counter_ignores_calls_without_figures() -> None:
    counter = CalibratedCounter(margin=0.0)
    counter.observe("m", estimated=0, exact=50)
    counter.observe("m", estimated=50, exact=0)
    assert counter.observations("m") == 0
    assert counter.ratio("m") == 1.0


def test_margin_is_added_on_top() -> None:
    counter = CalibratedCounter(margin=0.1)
    counter.observe("m", estimated=100, exact=100)
    assert counter.count("abcd" * 100, model="m") == 110


def test_for_model_binds_and_follows_later_calibration() -> None:
    counter = CalibratedCounter(margin=0.0)
    bound = counter.for_model("m")
    assert isinstance(bound, TokenCounter)
    messages = [{"role": "user", "content": "abcd" * 10}]
    before = bound.count_messages(messages)
    counter.observe("m", estimated=10, exact=20)
    assert bound.count_messages(messages) == 2 * before
    assert bound.count("abcd") == 2


@pytest.mark.parametrize(("margin", "decay"), [(-0.1, 0.1), (1.0, 0.1), (0.05, 0.0)])
def test_bad_settings_are_config_errors(margin: float, decay: float) -> None:
    with pytest.raises(ConfigError):
        CalibratedCounter(margin=margin, decay=decay)


def test_count_each_equals_counting_each_text_alone() -> None:
    """The budget counts a turn's ranked facts in one call; each figure must be the one
    `count` gives, for a calibrated counter bound to a model and for any other counter."""
    texts = ["Lives in Pune", "", "Allergic to peanuts 🥜", "x" * 400, "10 May 2026, 14:30"]
    calibrated = CalibratedCounter()
    calibrated.observe("m", estimated=100, exact=110)  # 100 * 1.1 * 1.05: float noise.
    bound = calibrated.for_model("m")
    assert count_each(bound, texts) == [bound.count(t) for t in texts]
    assert calibrated.count_each(texts, model="m") == [
        calibrated.count(t, model="m") for t in texts
    ]

    class Words:
        def count(self, text: str) -> int:
            return len(text.split())

        def count_messages(self, messages: Any) -> int:
            return sum(len(str(m["content"]).split()) for m in messages)

    assert count_each(Words(), texts) == [3, 0, 4, 1, 4]


@given(st.lists(st.lists(st.text(max_size=80), max_size=4), max_size=6))
def test_counting_groups_at_once_is_counting_each(texts: list[list[str]]) -> None:
    groups = [[{"role": "user", "content": t} for t in group] for group in texts]
    calibrated = CalibratedCounter(margin=0.07)
    calibrated.observe("m", estimated=100, exact=131)
    for counter in (EstimatingCounter(), calibrated, calibrated.for_model("m")):
        assert count_groups(counter, groups) == [counter.count_messages(g) for g in groups]


@given(st.lists(st.lists(st.text(max_size=80), max_size=4), max_size=6))
def test_counting_the_texts_is_counting_them_as_messages(texts: list[list[str]]) -> None:
    """The budget counts a thread's texts without framing each as a message, when the
    counter reads no role: the figures must be the messages' own."""
    groups = [[{"role": "assistant", "content": t} for t in group] for group in texts]
    calibrated = CalibratedCounter(margin=0.07)
    calibrated.observe("m", estimated=100, exact=131)
    for counter in (EstimatingCounter(), calibrated, calibrated.for_model("m")):
        assert count_text_groups(counter, texts) == count_groups(counter, groups)

    class Words:
        def count(self, text: str) -> int:
            return len(text.split())

        def count_messages(self, messages: Any) -> int:
            return sum(len(str(m["content"]).split()) for m in messages)

    assert count_text_groups(Words(), texts) is None  # It may read the roles: not here.
    assert count_text_groups(CalibratedCounter(base=Words()), texts) is None


def _by_pieces(text: str) -> int:
    """The estimate as its docstring states it, piece by piece (the definition `_estimate`
    counts with one expression)."""
    total = 0
    for piece in re.findall(r"[A-Za-z]+|[0-9]+|\s+|[^\sA-Za-z0-9]", text):
        first = piece[0]
        if first.isspace():
            total += len(piece) // 8
        elif first.isascii() and first.isalpha():
            total += math.ceil(len(piece) / 4)
        elif first.isascii() and first.isdigit():
            total += math.ceil(len(piece) / 3)
        else:
            total += 1
    return total


@given(
    st.text(max_size=300)
    | st.text(alphabet=st.sampled_from("ab1 \t\n\u00a0\u2003.é٣"), max_size=300)
)
def test_the_estimate_is_its_piece_by_piece_definition(text: str) -> None:
    assert _estimate.__wrapped__(text) == _by_pieces(text)


@given(
    st.one_of(
        st.floats(min_value=-1e9, max_value=1e18, allow_nan=False),
        st.builds(
            lambda n, e: n + e,
            st.integers(min_value=0, max_value=10**9),
            st.floats(min_value=-2e-6, max_value=2e-6),
        ),
        st.builds(
            lambda n, r: n * r,
            st.integers(min_value=0, max_value=10**6),
            st.floats(min_value=0.25, max_value=4.2),
        ),
    )
)
def test_the_rounding_up_is_the_rounded_ceiling(value: float) -> None:
    # `_ceil` asks `round` only near a whole number: the same as always asking it.
    assert _ceil(value) == math.ceil(round(value, 6))
