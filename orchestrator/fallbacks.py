"""The outcomes the orchestrator itself decides: built-in routes and safe fallbacks.

Each is an instruction for the response expert; none of them ever enters the thread.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel

from frontdesk.experts import Category, NeedMoreInfo, Outcome
from frontdesk.experts.providers.offline import LABEL as OFFLINE_LABEL
from frontdesk.labels import INSTRUCTION_LABEL

Unreadable = Literal["ask", "handoff"]
"""What an unreadable triage or request answer does (`Orchestrator(on_unreadable=...)`)."""

UNREADABLE = "The customer's latest message could not be understood."
"""How the instruction of an `unreadable` outcome begins: the turns after count them by it."""

ASKS_BEFORE_HANDOFF = 3
"""Unreadable turns in a row answered with a question; the next one hands off."""


def handoff(reason: str) -> Outcome:
    """`HUMAN`: a person takes over; `handoff` (why) becomes the hand-off's reason for the
    operators, opened with the reply (the outcome's own transaction)."""
    return Outcome(
        instruction=(
            "Tell the user a person from the team will take over this conversation shortly"
            " and they will not need to repeat themselves. Be warm and brief."
        ),
        handoff=reason,
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
    """The handler raised: apologise, change nothing, offer a retry or a person (the turn's
    stored outcome says `handler_failed`; `data` stays the handler's)."""
    return Outcome(
        instruction=(
            "Tell the user something went wrong on our side while handling the request and"
            " nothing was changed. Ask them to try again in a moment or to ask for a person."
            " Apologise."
        ),
    )


def required_fields(request_model: type[BaseModel] | None) -> list[str]:
    """The required fields of a request model, in order (none for the built-ins)."""
    if request_model is None:
        return []
    return [name for name, f in request_model.model_fields.items() if f.is_required()]


def unreadable(fields: Sequence[str]) -> Outcome:
    """The answer about the customer's message could not be read (after its retries): ask
    again instead of handing off, for the request's fields when the category is known."""
    if fields:
        listed = ", ".join(fields)
        question = f"Could you tell us again, in a few words: {listed}?"
        return Outcome(
            instruction=(
                f"{UNREADABLE} Ask them kindly for this information again, in a few plain"
                f" words: {listed}. A good question: {question}"
            ),
            data={"need_more_info": {"missing": list(fields), "question": question}},
            reply=question,
        )
    return Outcome(
        instruction=(
            f"{UNREADABLE} Apologise briefly and ask them to say it another way, in a few"
            " plain words."
        ),
        reply="Sorry, I did not quite follow. Could you say that another way, in a few words?",
    )


def is_unreadable(instruction: str) -> bool:
    """Whether a stored outcome's instruction is an `unreadable` one."""
    return instruction.startswith(UNREADABLE)


_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_TELL = re.compile(
    r"^(?:tell|inform|remind|let)\s+the\s+(?:user|customer)\s+(?:know\s+)?"
    r"(?:that\s+)?(.+)$",
    re.IGNORECASE | re.DOTALL,
)
_ASK = re.compile(
    r"^ask\s+(?:(?:the\s+(?:user|customer)|them)\s+)?(to|for|whether|if|which|what|how|when"
    r"|where|who)\s+(.+)$",
    re.IGNORECASE | re.DOTALL,
)
_PERSON = [
    (re.compile(r"\bthe (?:user|customer)'s\b", re.IGNORECASE), "your"),
    (re.compile(r"\bthe (?:user|customer)\b", re.IGNORECASE), "you"),
    (re.compile(r"\bthey're\b"), "you're"),
    (re.compile(r"\bthey\b"), "you"),
    (re.compile(r"\bthem\b"), "you"),
    (re.compile(r"\btheirs\b"), "yours"),
    (re.compile(r"\btheir\b"), "your"),
    (re.compile(r"\bthemselves\b"), "yourself"),
]
PLAIN_FALLBACK = "Thank you, your request has been handled."
"""The fallback reply when no sentence of the instruction reads as one to a customer."""


def plain_reply(outcome: Outcome) -> str:
    """The reply when the response expert could not write one after the handler acted:
    `Outcome.reply` when the handler gave one, else the instruction said to the customer
    (“Tell the user X” -> “X”, “Ask the user to X” -> “Could you X?”, “Apologise” ->
    “Sorry for the trouble.”; sentences about style are left out)."""
    if outcome.reply:
        return outcome.reply
    said: list[str] = []
    for sentence in _SENTENCE.split(outcome.instruction.strip()):
        text = _said(sentence.strip())
        if text and text not in said:
            said.append(text)
    return " ".join(said) or PLAIN_FALLBACK


def _said(sentence: str) -> str:
    body = sentence.rstrip(".!? ")
    if re.match(r"^apologi[sz]e\b", body, re.IGNORECASE):
        return "Sorry for the trouble."
    tell = _TELL.match(body)
    if tell:
        return _capital(_you(tell.group(1))) + "."
    ask = _ASK.match(body)
    if ask:
        word, rest = ask.group(1).lower(), _you(ask.group(2))
        if word == "to":
            return "Could you " + re.sub(r"\bor to\b", "or", rest) + "?"
        if word == "for":
            return f"Could you give us {rest}?"
        return f"Could you tell us {word} {rest}?"
    return ""


def _you(text: str) -> str:
    for pattern, replacement in _PERSON:
        text = pattern.sub(replacement, text)
    return text


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


_ECHO_CHARS = 40
"""How much of the instruction, word for word, a reply may not contain."""


def echoes_instruction(reply: str, instruction: str) -> bool:
    """Whether a reply repeats the handler's instruction (its label, or its first words
    verbatim, ignoring case and spacing): a small model may copy what it was given. The
    offline stand-in says its instruction on purpose, labelled `[offline]`: not an echo."""
    if reply.startswith(OFFLINE_LABEL):
        return False
    if INSTRUCTION_LABEL in reply:
        return True
    head = " ".join(instruction.split())[:_ECHO_CHARS].lower()
    return len(head) >= 20 and head in " ".join(reply.split()).lower()
