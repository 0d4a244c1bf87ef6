"""The screen: a check of each customer message before triage (`Orchestrator(screen=...)`).

A screen is `async (text, context) -> Screen`: the app's moderation, prompt-injection or
off-topic check (a provider's moderation endpoint, a classifier), given the message and
the thread. Its verdict:

    allow     the turn runs as usual
    refuse    the message is stored and answered with a safe reply (`REFUSED_REPLY`, or the
              screen's own `reply`): no expert is called
    handoff   a person takes over (the response expert says so)

With `screen_mode="shadow"` the verdict is only audited (`screen` events) and counted
(`frontdesk_screen_verdicts_total`), and the turn runs as usual: a new screen is watched
on real traffic before it may refuse anyone. The library ships one screen,
`HeuristicScreen` (patterns, no model call); benchmarks/screen.py measures its recall and
false positives on a small labelled set.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from frontdesk import metrics
from frontdesk.errors import ConfigError
from frontdesk.experts import Outcome
from frontdesk.orchestrator import fallbacks
from frontdesk.orchestrator._recorder import TurnRecorder
from frontdesk.threads.builder import ThreadMessage

Action = Literal["allow", "refuse", "handoff"]
ScreenMode = Literal["enforce", "shadow"]
ACTIONS: tuple[Action, ...] = ("allow", "refuse", "handoff")
MODES: tuple[ScreenMode, ...] = ("enforce", "shadow")

REFUSED_REPLY = (
    "Sorry, I can't help with that here. I can help with questions about your account and"
    " our services."
)
"""The safe reply to a refused message (no model writes it)."""


@dataclass(frozen=True, kw_only=True)
class Screen:
    """A screen's verdict on one message."""

    action: Action
    reason: str = ""
    """Why (audited; shown to a person on a hand-off)."""
    reply: str | None = None
    """For `refuse`: the words to send instead of `REFUSED_REPLY` (sent verbatim)."""

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ConfigError(f"Screen action must be one of {ACTIONS}, got {self.action!r}")


@dataclass(frozen=True, kw_only=True)
class ScreenContext:
    """What a screen is given besides the message."""

    conversation_id: str
    user_id: str | None
    thread: Sequence[ThreadMessage]
    """The user thread up to and including the message (user and assistant turns only)."""


ScreenFunction = Callable[[str, ScreenContext], Awaitable[Screen]]


def check_mode(mode: str) -> ScreenMode:
    """`mode` as a `ScreenMode`, or a `ConfigError` naming the choices."""
    if mode not in MODES:
        raise ConfigError(f"screen_mode must be one of {MODES}, got {mode!r}")
    return mode


async def screened(
    screen: ScreenFunction,
    mode: ScreenMode,
    recorder: TurnRecorder,
    text: str,
    context: ScreenContext,
) -> Outcome | None:
    """Run `screen` on the message: the outcome that replaces the experts' (a refusal, a
    hand-off), or `None` to run the turn as usual (allowed, or shadow mode)."""
    verdict = await screen(text, context)
    if not isinstance(verdict, Screen):
        raise TypeError(f"the screen returned {type(verdict).__name__}, not a Screen")
    recorder.note("screen", action=verdict.action, reason=verdict.reason, mode=mode)
    metrics.screen_verdict(action=verdict.action, mode=mode)
    if mode == "shadow" or verdict.action == "allow":
        return None
    if verdict.action == "handoff":
        return fallbacks.handoff(f"screened: {verdict.reason}" if verdict.reason else "screened")
    return Outcome(
        instruction=f"Refuse politely (screened: {verdict.reason or 'refused'}).",
        reply=verdict.reply or REFUSED_REPLY,
    )


# -- the heuristic screen ----------------------------------------------------------------

_INJECTION = [
    r"\b(ignore|disregard|forget|override|bypass)\b.{0,40}\b(previous|prior|above|earlier|all|"
    r"your|the|these|those|any)\b.{0,30}\b(instructions?|prompts?|rules?|guidelines?|"
    r"directives?|polic(y|ies)|guardrails?|restrictions?)",
    r"\b(system|developer|hidden|initial|original)\s+(prompt|message|instructions?)\b",
    r"\b(reveal|show|print|repeat|output|tell me|leak|dump)\b.{0,30}\b(your|the)\b.{0,20}"
    r"\b(prompt|instructions?|rules|configuration|system message)",
    r"\byou are (now|no longer)\b",
    r"\b(act|behave|respond) as (if you were |though you were )?(an?|my|the)\b.{0,30}"
    r"\b(ai|assistant|model|admin|developer|unrestricted|jailbroken|dan)\b",
    r"\bpretend (to be|you are|you're)\b",
    r"\b(developer|god|admin|debug|jailbreak|dan) mode\b",
    r"\bjailbreak|\bdo anything now\b",
    r"<\|?(im_start|im_end|system|endoftext)\|?>|\[/?(inst|sys)\]|^\s*#{2,}\s*(system|instruction)",
    r"\bnew (instructions|rules|task)\s*:",
    r"\b(approve|authori[sz]e|process|execute|send)\b.{0,40}\bwithout\b.{0,30}"
    r"\b(confirm(ation)?|verif(y|ication)|checks?|asking)\b",
    r"\b(as|i am|i'm) (the|an?|your) (administrator|admin|developer|system|bank manager)\b"
    r".{0,60}\b(authori[sz]e|override|approve|grant|instruct)",
]
_OFF_TOPIC = [
    r"\b(write|compose|generate|draft)\b.{0,30}\b(poem|song|lyrics|story|essay|novel|haiku|"
    r"limerick|rap|joke|screenplay|code|script|program|function|sql|regex)\b",
    r"\b(python|javascript|java|c\+\+|rust|golang|typescript|html|css)\b.{0,40}\b(code|"
    r"function|script|program|bug|error|class)\b",
    r"\b(solve|do)\b.{0,20}\b(my )?(homework|assignment|equation|integral|derivative)\b",
    r"\b(translate)\b.{0,40}\b(into|to) (french|german|spanish|italian|chinese|japanese)\b",
    r"\bwho (won|will win)\b.{0,40}\b(election|world cup|super bowl|match|game)\b",
    r"\b(recipe|cook|bake)\b.{0,30}\b(for|a|an)\b.{0,20}\b(cake|pasta|curry|dinner|bread)\b",
    r"\b(capital of|meaning of life|tell me a joke)\b",
]


@dataclass(frozen=True, kw_only=True)
class HeuristicScreen:
    """Refuses likely prompt injections and off-topic requests by pattern (no model call).

    Patterns are English; the false positives it has on customer messages and what it
    misses are measured in benchmarks/screen.py (docs/safeguards.md). Run it with
    `screen_mode="shadow"` first on your own traffic. `off_topic=False` checks injections
    only; `extra` adds patterns of your own (refused as `custom`).
    """

    off_topic: bool = True
    extra: Sequence[str] = ()
    _injection: re.Pattern[str] = field(init=False, repr=False)
    _off_topic: re.Pattern[str] = field(init=False, repr=False)
    _extra: re.Pattern[str] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        flags = re.IGNORECASE | re.MULTILINE
        object.__setattr__(self, "_injection", re.compile("|".join(_INJECTION), flags))
        object.__setattr__(self, "_off_topic", re.compile("|".join(_OFF_TOPIC), flags))
        try:
            extra = re.compile("|".join(self.extra), flags) if self.extra else None
        except re.error as e:
            raise ConfigError(f"HeuristicScreen extra pattern does not compile: {e}") from e
        object.__setattr__(self, "_extra", extra)

    def verdict(self, text: str) -> Screen:
        """The verdict on one message (what the screen returns, without the thread)."""
        if self._injection.search(text):
            return Screen(action="refuse", reason="prompt injection")
        if self._extra is not None and self._extra.search(text):
            return Screen(action="refuse", reason="custom")
        if self.off_topic and self._off_topic.search(text):
            return Screen(action="refuse", reason="off topic")
        return Screen(action="allow")

    async def __call__(self, text: str, context: ScreenContext) -> Screen:
        return self.verdict(text)
