"""The customer's language: detected per turn (`Reply.language`), answered in.

Triage's structured answer carries the language it read; a label that is no BCP 47 tag is
ignored, and so is one the detector on the text (`experts/language.py`) contradicts when
it is sure. A turn without triage (an answer to the bot's own question), or with a triage
answer that gave none, takes the detector's label; a message too short to tell ("£12",
"yes") keeps the conversation's language from the turn before. The response expert
answers in the message's language unless `Orchestrator(languages=[...])` does not list
it, then in the first listed; the instruction names the language only when it is not
English, so an English turn's prompt is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from frontdesk.experts import language as _detector


def of_turn(said_by_triage: str | None, text: str, before: str | None) -> tuple[str | None, str]:
    """The message's language and what said so (`triage`, `detector`, `before`, `none`)."""
    detected = _detector.detect(text)
    label = _detector.valid_tag(said_by_triage)
    if label is not None and (
        detected is None or _detector.primary(label) == _detector.primary(detected)
    ):
        return label, "triage"
    if detected is not None:
        return detected, "detector"
    if before is not None:
        return before, "before"
    return None, "none"


def check_languages(languages: object) -> tuple[str, ...] | None:
    """`languages` as the tags it lists (`ConfigError` for anything but BCP 47 tags)."""
    from frontdesk.errors import ConfigError

    if languages is None:
        return None
    if isinstance(languages, str) or not isinstance(languages, Sequence) or not languages:
        raise ConfigError(
            f"languages must be a non-empty list of BCP 47 tags (['en', 'cy']), not {languages!r}"
        )
    tags = []
    for tag in languages:
        valid = _detector.valid_tag(tag)
        if valid is None:
            raise ConfigError(f"languages: {tag!r} is not a BCP 47 language tag such as 'cy'")
        tags.append(valid)
    return tuple(tags)


def answered_in(language: str | None, languages: Sequence[str] | None) -> str | None:
    """The language of the reply: the message's, when `languages` lists it (or lists
    nothing), else the first listed."""
    if not languages:
        return language
    if language is not None:
        wanted = _detector.primary(language)
        for tag in languages:
            if _detector.primary(tag) == wanted:
                return tag
    return languages[0]


def instructed(instruction: str, reply_language: str | None) -> str:
    """`instruction` with the reply's language named (not for English)."""
    if reply_language is None or _detector.primary(reply_language) == "en":
        return instruction
    name = _detector.name_of(reply_language)
    return f"{instruction}\n\nWrite the reply in {name} ({reply_language})."
