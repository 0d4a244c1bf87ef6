"""`query_words` gives the words of its first version (kept below verbatim), which split
each word at its apostrophe and stopped at `MAX_QUERY_WORDS` in a loop of its own."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.turns import _user_message
from frontdesk.threads.memory import _STOP, MAX_QUERY_WORDS, query_words

# -- query_words before (threads/memory.py at 5887bcf, verbatim) --------------------------

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


def query_words_before(text: str) -> list[str]:
    """The distinct searchable words of `text` (lower case, no stop words), in order."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        word = word.split("'")[0]
        if len(word) > 1 and word not in _STOP and word not in seen:
            seen[word] = None
        if len(seen) >= MAX_QUERY_WORDS:
            break
    return list(seen)


# ------------------------------------------------------------------------------------------

_PIECES = st.one_of(
    st.sampled_from(sorted(_STOP)),
    st.sampled_from(["I", "Hindi", "don't", "x'y'z", "ab'", "'ab", "A-10012", "42", "ÉTÉ", "İ"]),
    st.sampled_from(["a", "b", "é", "ß", "_", "'", "\u2019", "-", " ", ", ", ".", "\n", "1"]),
    st.text(max_size=6),
)


def test_the_same_words_on_the_benchmark_and_long_messages() -> None:
    many = " ".join(f"word{i} Word{i}'s w{i}_x" for i in range(60))
    for text in [_user_message(i) for i in range(1, 30)] + [many, many.upper(), ""]:
        assert query_words(text) == query_words_before(text), text
    assert len(query_words(many)) == MAX_QUERY_WORDS


@settings(max_examples=2000, deadline=None)
@given(st.lists(_PIECES, max_size=80))
def test_the_same_words_on_generated_texts(pieces: list[str]) -> None:
    for text in (" ".join(pieces), "".join(pieces)):
        assert query_words(text) == query_words_before(text), text
