"""The response expert's closing judgement: the `[closes]` tag is read, and taken off the
reply and off every stream of it, wherever the pieces split it."""

from __future__ import annotations

import pytest

from frontdesk.experts.providers.offline import closes_conversation
from frontdesk.experts.response import CLOSES, Tagless, Trimmed, without_closing

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "text",
    [
        "Glad to help, goodbye!\n[closes]",
        "  Glad to help [CLOSES] goodbye!  ",
        "Glad to help, the tag-like [close] stays, and so does [ ]",
        "Ends with a start of the tag [clo",
        "",
    ],
)
async def test_every_split_streams_the_stored_text(text: str) -> None:
    stored, closes = without_closing(text)
    assert closes == (CLOSES in text.lower())
    for cut in range(len(text) + 1):
        for second in range(cut, len(text) + 1):
            pieces: list[str] = []

            async def sink(piece: str, pieces: list[str] = pieces) -> None:
                pieces.append(piece)

            tagless = Tagless(Trimmed(sink))
            for part in (text[:cut], text[cut:second], text[second:]):
                await tagless(part)
            await tagless.flush()
            assert "".join(pieces) == stored.strip(), (cut, second)


@pytest.mark.parametrize(
    ("said", "closes"),
    [
        ("That's all, thanks", True),
        ("No, I don't need anything else. Bye!", True),
        ("I'm all set, cheers", True),
        ("thanks, but where is my order?", False),
        ("I want 3 bags, that's all", False),
        ("I still need help, bye", False),
        ("thanks", False),
    ],
)
def test_the_offline_stand_in_judges_by_its_phrases(said: str, closes: bool) -> None:
    assert closes_conversation(said) is closes
