"""The offline stand-in with passages: it quotes the best one, and reads no passage as the
user's words."""

from __future__ import annotations

from frontdesk.experts.providers import ModelRequest, OfflineModel
from frontdesk.knowledge import Passage
from frontdesk.labels import DOCUMENTS_LABEL

STORING = Passage(
    id="p1",
    source="help.md",
    title="Storing potatoes",
    text="Keep potatoes in a cool, dark place. Never in the fridge. They keep for weeks.",
    version=1,
)


def test_the_reply_quotes_the_best_passage_with_its_source() -> None:
    question = f"How do I store potatoes?\n\n{DOCUMENTS_LABEL}\n\n[help.md - Storing potatoes]\n..."
    request = ModelRequest(
        expert="response",
        system="",
        messages=[
            {"role": "user", "content": question},
            {"role": "assistant", "content": "Answer the question from the reference passages."},
        ],
        passages=(STORING,),
    )
    reply = OfflineModel().answer(request)
    assert "From our help pages (help.md, Storing potatoes): Keep potatoes in a cool" in reply
    assert "They keep for weeks" not in reply  # Two sentences at most.
    without = OfflineModel().answer(
        ModelRequest(expert="response", system="", messages=list(request.messages))
    )
    assert "help pages" not in without
