"""The outcomes the orchestrator itself decides: built-in routes and safe fallbacks.

Each is an instruction for the response expert; none of them ever enters the thread.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from frontdesk.experts import Category, NeedMoreInfo, Outcome


def handoff(reason: str) -> Outcome:
    """`HUMAN`: a person takes over; `data["handoff"]` tells the embedding bot, and
    `data["reason"]` (why) becomes the hand-off's reason for the operators."""
    return Outcome(
        instruction=(
            "Tell the user a person from the team will take over this conversation shortly"
            " and they will not need to repeat themselves. Be warm and brief."
        ),
        data={"handoff": True, "reason": reason},
    )


def _topic(description: str) -> str:
    """The head of a triage description, which is written for the triage expert:
    "Money back on an order: a late delivery, ..." -> "money back on an order"."""
    head = re.split(r"\s*[:;(]|,\s*or\b|\.\s", description, maxsplit=1)[0].strip().rstrip(".")
    return head[:1].lower() + head[1:]


def small_talk(categories: Iterable[Category]) -> Outcome:
    """`OTHER`: a polite reply that says, in a few words, what the bot can help with (not
    the triage descriptions themselves, which are written for a model, not a customer).

    The topics follow a colon, as a list: a description may be a noun phrase ("money back
    on an order") or a verb phrase ("freeze a lost or stolen card"), and both read as items
    of a list where "help with freeze a card" would not."""
    topics = [_topic(c.description) for c in categories]
    listed = ", ".join(topics[:-1]) + f" and {topics[-1]}" if len(topics) > 1 else "".join(topics)
    return Outcome(
        instruction=(
            f"Tell the user these are the things we can help with: {listed}."
            " Answer small talk politely and briefly, in kind; say plainly when something is"
            " outside what we handle."
        )
    )


def ask_for(missing: NeedMoreInfo) -> Outcome:
    """The request lacks required fields: ask for exactly those."""
    fields = ", ".join(missing.missing) or "the details of the request"
    return Outcome(
        instruction=(
            f"Ask the user for exactly this missing information: {fields}."
            f" A good question: {missing.question}"
        ),
        data={"need_more_info": missing.model_dump()},
    )


def handler_failed() -> Outcome:
    """The handler raised: apologise, change nothing, offer a retry or a person."""
    return Outcome(
        instruction=(
            "Tell the user something went wrong on our side while handling the request and"
            " nothing was changed. Ask them to try again in a moment or to ask for a person."
            " Apologise."
        ),
        data={"error": "handler_failed"},
    )
