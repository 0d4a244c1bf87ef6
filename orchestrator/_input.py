"""Checks a user's text before anything is stored or sent.

Role-like text ("SYSTEM: ...", `<|im_start|>system`, a JSON `{"role": "system"}`) is NOT
rejected or rewritten: it is stored verbatim and sent as one user turn, because the thread
is a list of typed turns, never text parsed for structure.
"""

from __future__ import annotations

import re

from frontdesk.errors import EmptyMessage, ForbiddenCharacters, InputTooLarge

DEFAULT_MAX_MESSAGE_CHARS = 16_000

# Tab, newline and carriage return are ordinary text; every other C0/C1 control (Unicode's
# category Cc) is refused, and so is a lone surrogate (Cs). One regex scan, not a category
# lookup per character: every user message is checked (a turn spent 1 % of its CPU here).
_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def check_user_text(text: object, *, max_chars: int = DEFAULT_MAX_MESSAGE_CHARS) -> str:
    """Return `text` unchanged if it can be a user turn.

    Raises:
        EmptyMessage: empty or whitespace-only.
        InputTooLarge: more than `max_chars` characters.
        ForbiddenCharacters: NUL or other control characters, or lone surrogates.
    """
    if not isinstance(text, str):
        raise ForbiddenCharacters(f"user text must be str, not {type(text).__name__}")
    if not text.strip():
        raise EmptyMessage("the message is empty; send some text")
    if len(text) > max_chars:
        raise InputTooLarge(
            f"the message has {len(text):,} characters; the limit is {max_chars:,}"
            " (Orchestrator(max_message_chars=...) changes it)"
        )
    found = _FORBIDDEN.search(text)
    if found is not None:
        char, index = found.group(), found.start()
        if not "\ud800" <= char <= "\udfff":
            raise ForbiddenCharacters(
                f"the message contains the control character U+{ord(char):04X} at position"
                f" {index}; remove it"
            )
        raise ForbiddenCharacters(
            f"the message contains an unpaired surrogate U+{ord(char):04X} at position"
            f" {index}; it is not valid Unicode text"
        )
    return text
