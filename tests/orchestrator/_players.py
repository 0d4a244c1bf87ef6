"""A scripted customer and judge for the `simulate:` tests (`--user`/`--judge` take these)."""

from __future__ import annotations

from typing import Any

from frontdesk.experts.providers import OfflineModel
from frontdesk.testing import FunctionModel, ModelRequest

LINES = ["I lost my card, please freeze it", "last four: 4242"]


def _customer(request: ModelRequest) -> Any:
    """Says its lines in order, one per bot reply, then is done."""
    said = sum(m["role"] == "assistant" for m in request.messages)
    if said >= len(LINES):
        return {"message": "thanks, bye", "done": True}
    return {"message": LINES[said], "done": False}


def _judge(request: ModelRequest) -> Any:
    """Passes a criterion when the transcript holds the word it quotes ('says "frozen"')."""
    transcript = request.messages[-1]["content"].lower()
    criteria = [line[2:] for line in request.system.splitlines() if line.startswith("- ")]
    verdicts = []
    for criterion in criteria:
        word = criterion.split('"')[1].lower() if '"' in criterion else ""
        found = bool(word) and word in transcript
        verdicts.append(
            {
                "criterion": criterion,
                "passed": found,
                "reason": f"the transcript {'says' if found else 'never says'} {word!r}",
            }
        )
    return {"verdicts": verdicts}


user = FunctionModel(_customer, name="scripted-user")
judge = FunctionModel(_judge, name="scripted-judge")


def offline() -> OfflineModel:
    """The offline stand-in, built by a function (what `--model module:function` may name)."""
    return OfflineModel()
