"""The language detector's guards: too few letters is no label; plain English is English."""

from __future__ import annotations

import re
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from frontdesk.experts import language as detector
from frontdesk.experts.language import MIN_LETTERS, _enough_letters, detect


def _letters(text: str) -> int:
    return sum(1 for c in text if unicodedata.category(c)[0] in "LM")


@given(st.text(max_size=40) | st.text(alphabet=st.characters(max_codepoint=127), max_size=40))
def test_enough_letters_counts_unicode_letters_and_marks(text: str) -> None:
    assert _enough_letters(text) == (_letters(text) >= MIN_LETTERS)


def test_short_messages_have_no_label_and_plain_english_is_english() -> None:
    assert detect("£12, ok?") is None
    assert detect("a1 b2 c3 d4 e5 f6 g7 h8 i9 j0 k") is None  # 11 letters.
    assert detect("Can you tell me where my order is, please?") == "en"


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=200))
def test_the_words_of_ascii_text_are_the_expressions_words(text: str) -> None:
    """`_plainly_english` reads the words with a table, not a regular expression: the
    same words (and so the same answer)."""
    found = re.findall(r"[a-z]+", text.lower())
    assert [w.decode() for w in detector._ascii_words(text)] == found
    assert detector._plainly_english(text) == (len(set(found) & detector._ENGLISH) >= 2)
