"""The response expert: the reply to the latest user message, from the handler's instruction.

It reads the same user thread as every expert plus ONE trailing assistant message holding
the instruction; that message exists only in this request (and the audit log), never in
the thread.

Given `on_delta`, the reply is streamed: each piece of text is handed on as the provider
sends it, trimmed so that the pieces joined equal the stored (stripped) reply text.

The expert also judges whether the customer closed the conversation ("that's all,
thanks"): its prompt asks it to end such a reply with the tag `CLOSES` (`[closes]`), which
is taken off the text wherever it stands (and off the stream: a piece that may begin the
tag is held back until the next shows it is not) and read as `ResponseResult.closes` only
at the very end of the reply. The tag is the model's word to us, never the customer's: when
anything the expert was sent holds it (a customer who wrote it, or a handler's instruction
quoting them), a tag at the end may be a copy, so it is not read as a closing
(`ResponseResult.echoed`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from frontdesk.experts._call import CallObserver, ExpertCall, MemoryBlock
from frontdesk.experts.citations import CitedDeltas, strip_citations
from frontdesk.experts.providers.base import Message, ModelResponse, OnDelta
from frontdesk.knowledge import Passage
from frontdesk.labels import CLOSES_TAG


@dataclass(frozen=True, kw_only=True)
class ResponseResult:
    """The reply text and the response behind it."""

    text: str
    response: ModelResponse
    passages: tuple[Passage, ...] = ()
    """The passages of the business's documents the request carried (`Reply.sources`)."""
    closes: bool = False
    """The expert judged that the customer's message closed the conversation (its reply
    ended with `CLOSES`, which nothing it was sent holds): the conversation is resolved by
    the customer (orchestrator/resolution.py)."""
    echoed: bool = False
    """The reply ended with `CLOSES`, but what the expert was sent holds the tag too (the
    customer's words, or a handler's instruction quoting them): maybe a copy, so not a
    closing (`closes` is False; the orchestrator audits it)."""
    cited: tuple[str, ...] = ()
    """The passage numbers the reply cites, as the model wrote them (`experts.citations`;
    checked against `passages` by the orchestrator): empty when no passage was sent."""


CLOSES = CLOSES_TAG
"""The tag the response expert ends a reply with when the customer's latest message closes
the conversation (they have what they came for: "that's all, thanks"); never shown."""


def without_closing(text: str) -> tuple[str, bool]:
    """`text` without any `CLOSES` tag (matched in any letter case), and whether it ended
    with one (only a tag at the very end is the expert's closing; one elsewhere, a quote of
    it, is taken off all the same)."""
    lowered = text.lower()
    if CLOSES not in lowered:  # Almost every reply: one pass over it.
        return text, False
    closes = lowered.rstrip().endswith(CLOSES)
    while (at := text.lower().find(CLOSES)) >= 0:
        text = text[:at] + text[at + len(CLOSES) :]
    return text, closes


# The tag's word between brackets, once folded (`_folded`): any spacing, any bracket.
_TAG_LIKE = re.compile(r"[\[({<]\W*c\W*l\W*o\W*s\W*e\W*s\W*[\])}>]")


def holds_closing(texts: Iterable[str]) -> bool:
    """Whether any of `texts` holds the `CLOSES` tag or a near-copy of it (any letter case,
    spacing or bracket, full-width or invisible characters): text the expert was sent that
    a model could copy the tag from."""
    return any(_TAG_LIKE.search(_folded(text)) for text in texts)


def _folded(text: str) -> str:
    """`text` in compatibility form (full-width brackets as plain ones), case-folded, its
    invisible (format) characters taken out."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")


@dataclass(frozen=True, kw_only=True)
class ResponseExpert:
    """Writes the reply."""

    call: ExpertCall

    async def run(
        self,
        messages: Sequence[Message],
        instruction: str,
        *,
        metadata: Mapping[str, str],
        cache_prefix: int = 0,
        on_delta: OnDelta | None = None,
        observer: CallObserver | None = None,
        memory: MemoryBlock | None = None,
        passages: Sequence[Passage] = (),
    ) -> ResponseResult:
        """Answer the last user message of `messages`, following `instruction`.

        With `on_delta`, the text is streamed to it (see the module docstring); a model that
        cannot stream hands its whole text over as one piece. With `passages`, the reply's
        citation markers are taken out of its text (and of the stream) and returned as
        `cited` (`experts.citations`).
        """
        with_instruction: list[Message] = [
            *messages,
            {"role": "assistant", "content": instruction},
        ]
        request = self.call.build(
            with_instruction,
            output_type=None,
            cache_prefix_messages=cache_prefix,
            metadata=metadata,
            memory=memory,
            passages=passages,
        )
        sink = None if on_delta is None else Trimmed(on_delta)
        deltas = None if sink is None or not passages else CitedDeltas(sink)
        tagless = None if sink is None else Tagless(deltas or sink)
        response = await self.call.send(request, observer, on_delta=tagless)
        if tagless is not None:
            await tagless.flush()
        if deltas is not None:
            await deltas.finish()
        text, closes = without_closing(str(response.output))
        # Read only when the reply closes (rare): a plain turn pays nothing for it.
        echoed = closes and holds_closing(m["content"] for m in request.messages)
        cited: list[str] = []
        if passages:  # Only a reply that was sent passages is read for citations.
            text, cited = strip_citations(text)
        return ResponseResult(
            text=text.strip(),
            response=response,
            passages=request.passages,
            closes=closes and not echoed,
            echoed=echoed,
            cited=tuple(cited),
        )


class Tagless:
    """Hands on text pieces without the `CLOSES` tag: what may be the start of one is held
    back until the next piece shows whether it is; `flush` hands on what is held at the end.
    Joined, the pieces are `without_closing` of the whole text."""

    def __init__(self, on_delta: OnDelta) -> None:
        self._on_delta = on_delta
        self._held = ""

    async def __call__(self, text: str) -> None:
        text, _ = without_closing(self._held + text)
        keep = _tag_start(text)
        self._held = text[len(text) - keep :] if keep else ""
        out = text[: len(text) - keep]
        if out:
            await self._on_delta(out)

    async def flush(self) -> None:
        """Hand on what was held as a possible tag start (the text ended without the tag)."""
        held, self._held = self._held, ""
        if held:
            await self._on_delta(held)


def _tag_start(text: str) -> int:
    """The length of the longest end of `text` that begins `CLOSES` (0: none)."""
    low = text[-(len(CLOSES) - 1) :].lower()
    for size in range(len(low), 0, -1):
        if CLOSES.startswith(low[-size:]):
            return size
    return 0


class Trimmed:
    """Hands on text pieces without the whole text's leading and trailing whitespace.

    Leading whitespace is dropped; whitespace at the end of a piece is held back until
    more text follows, so whitespace the reply ends with is never handed on.
    """

    def __init__(self, on_delta: OnDelta) -> None:
        self._on_delta = on_delta
        self._started = False
        self._held = ""

    async def __call__(self, text: str) -> None:
        if not self._started:
            text = text.lstrip()
            if not text:
                return
            self._started = True
        body = text.rstrip()
        if not body:
            self._held += text
            return
        out = self._held + body
        self._held = text[len(body) :]
        await self._on_delta(out)
