"""Replay: re-run recorded turns and report what changed, so a prompt or model change can
be gated in CI.

This module knows nothing of experts: a *runner* (built on the application by the
developer's kit, see `devkit/replay.py`) re-runs one recorded turn and returns what it
decided. Here the recorded turns are read from the audit rows and each result is compared
with the record: category, request fields, NeedMoreInfo, and the reply (a text diff). A
changed category or request makes the exit code 1.
"""

from __future__ import annotations

import difflib
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from frontdesk.audit.transcript import Transcript, TurnView


@dataclass(frozen=True)
class RecordedTurn:
    """One turn as recorded, with what a runner needs to re-run it."""

    conversation_id: str
    number: int
    """1-based position among the conversation's recorded turns."""
    view: TurnView

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The user thread exactly as the triage expert was sent it."""
        return self.sent("triage") or []

    def sent(self, expert: str) -> list[dict[str, Any]] | None:
        """The messages `expert` was sent in this turn (its first call's first attempt), or
        `None` when it was not called.

        Each expert has its own token budget, so each was sent its own cut of the thread:
        a replay must send each the messages it was sent, not triage's shorter cut. The
        response expert's trailing instruction turn is left out (the runner adds its own).
        """
        for call in self.view.calls:
            if call.expert == expert and call.attempts:
                messages = [
                    {"role": m["role"], "content": m["content"]} for m in call.attempts[0].messages
                ]
                if expert == "response" and messages and messages[-1]["role"] == "assistant":
                    messages.pop()
                return messages
        return None

    def outputs(self, expert: str) -> list[Any]:
        """The parsed outputs of the expert's successful calls in this turn, in order (a
        speculative call whose answer was discarded is left out: the turn did not use it)."""
        return [
            c.output
            for c in self.view.calls
            if c.expert == expert and c.ok and c.attempts[-1].speculation != "discarded"
        ]


@dataclass(frozen=True)
class ReplayResult:
    """What a turn decided: recorded, or produced again by a runner."""

    category: str | None
    request: dict[str, Any] | None = None
    need_more_info: dict[str, Any] | None = None
    reply: str | None = None
    note: str | None = None
    """Why part of the turn was not re-run (e.g. a changed route whose handler has effects)."""

    @classmethod
    def recorded(cls, turn: RecordedTurn) -> ReplayResult:
        """The decisions the audit log holds for the turn."""
        v = turn.view
        return cls(v.category, v.request, v.need_more_info, v.reply_text)


TurnRunner = Callable[[RecordedTurn], Awaitable[ReplayResult]]
"""Re-runs one recorded turn's experts and returns what they decided."""


@dataclass(frozen=True)
class FieldChange:
    """One request field whose value changed."""

    name: str
    before: Any
    after: Any


@dataclass(frozen=True)
class TurnDiff:
    """How one replayed turn differs from its record."""

    turn: RecordedTurn
    before: ReplayResult
    after: ReplayResult | None
    error: str | None = None
    request_changes: list[FieldChange] = field(default_factory=list)
    reply_diff: list[str] = field(default_factory=list)

    unknown_category: bool = False
    """The recorded category is not one of the replaying app's: the turn was not re-run
    (the app is not the one that produced it), which is no change of the turn."""

    @property
    def category_changed(self) -> bool:
        """Whether triage picked another category."""
        return self.after is not None and self.after.category != self.before.category

    @property
    def need_more_info_changed(self) -> bool:
        """Whether the request expert asked for other (or no longer any) fields."""
        return self.after is not None and _missing(self.after) != _missing(self.before)

    @property
    def reply_changed(self) -> bool:
        """Whether the reply text differs."""
        return bool(self.reply_diff)

    @property
    def gating(self) -> bool:
        """A change CI should stop on: category, request or NeedMoreInfo, or a failed run."""
        return (
            self.error is not None
            or self.category_changed
            or bool(self.request_changes)
            or self.need_more_info_changed
        )


def _missing(result: ReplayResult) -> tuple[str, ...] | None:
    if result.need_more_info is None:
        return None
    return tuple(sorted(result.need_more_info.get("missing") or ()))


def request_changes(
    before: dict[str, Any] | None, after: dict[str, Any] | None
) -> list[FieldChange]:
    """Field-by-field changes between two extracted requests (`None` = no request)."""
    if before is None or after is None:
        return [] if before == after else [FieldChange("(request)", before, after)]
    names = sorted(set(before) | set(after))
    return [
        FieldChange(n, before.get(n), after.get(n)) for n in names if before.get(n) != after.get(n)
    ]


def compare(turn: RecordedTurn, after: ReplayResult | None, error: str | None = None) -> TurnDiff:
    """The diff of one turn's record against its replay."""
    before = ReplayResult.recorded(turn)
    if after is None:
        return TurnDiff(turn, before, None, error=error)
    reply_diff: list[str] = []
    if after.reply is not None and after.reply != before.reply:
        reply_diff = list(
            difflib.unified_diff(
                (before.reply or "").splitlines(),
                after.reply.splitlines(),
                "recorded",
                "replayed",
                lineterm="",
            )
        )
    return TurnDiff(
        turn,
        before,
        after,
        error=error,
        request_changes=request_changes(before.request, after.request),
        reply_diff=reply_diff,
    )


def recorded_turns(transcript: Transcript) -> list[RecordedTurn]:
    """The turns that can be replayed: those whose triage call was recorded, or that a
    router routed with no triage call (never a hand-off's: see `handoff_turns`)."""
    turns = [
        RecordedTurn(transcript.conversation_id, n, t)
        for n, t in enumerate(transcript.turns, start=1)
    ]
    return [t for t in turns if (t.messages or _router_routed(t.view)) and not _is_handoff(t.view)]


def _router_routed(view: TurnView) -> bool:
    return view.routed is not None and view.routed.get("by") == "router"


def _is_handoff(view: TurnView) -> bool:
    return view.held or view.author != "bot" or (not view.started and not view.calls)


def handoff_turns(transcript: Transcript) -> list[TurnView]:
    """The turns of a hand-off to a person: messages kept for the person and operator (or
    timeout) messages. A replay skips them as recorded facts: no model wrote them, and the
    bot turns after them are replayed with them in their thread, as they were sent."""
    return [t for t in transcript.turns if _is_handoff(t) and not t.is_compaction]


@dataclass
class ReplayReport:
    """Every replayed turn's diff, and the exit code for CI."""

    diffs: list[TurnDiff] = field(default_factory=list)
    skipped: int = 0
    """Hand-off turns left as recorded facts (`handoff_turns`)."""

    @property
    def exit_code(self) -> int:
        """2 when turns were recorded with categories the app lacks (the wrong app: nothing
        can be said about them), else 1 when a category or request changed (or a turn
        failed to re-run), else 0."""
        if self.unknown_categories:
            return 2
        return 1 if any(d.gating for d in self.diffs) else 0

    @property
    def unknown_categories(self) -> list[str]:
        """The recorded categories the replaying app lacks, sorted."""
        return sorted({str(d.before.category) for d in self.diffs if d.unknown_category})

    def summary(self) -> list[tuple[str, int, int, int, int, int, int]]:
        """Per conversation: turns, category, request, NeedMoreInfo, reply changes, errors."""
        rows: dict[str, list[int]] = {}
        for d in self.diffs:
            r = rows.setdefault(d.turn.conversation_id, [0, 0, 0, 0, 0, 0])
            flags = (
                not d.unknown_category,
                d.category_changed,
                bool(d.request_changes),
                d.need_more_info_changed,
                d.reply_changed,
                d.error is not None,
            )
            for i, flag in enumerate(flags):
                r[i] += int(flag)
        return [(cid, *r) for cid, r in rows.items()]  # type: ignore[misc]


async def replay_transcript(
    transcript: Transcript, runner: TurnRunner, *, categories: Collection[str] | None = None
) -> list[TurnDiff]:
    """Re-run each recorded turn of one conversation with `runner` and compare.

    A runner failure is reported on its turn (and gates CI); it never stops the replay.

    Args:
        transcript: The conversation.
        runner: Re-runs one turn.
        categories: The replaying app's category names: a turn recorded with another
            category is reported as `unknown_category`, not re-run (never as a change).
    """
    diffs = []
    for turn in recorded_turns(transcript):
        recorded = turn.view.category
        if categories is not None and recorded is not None and recorded not in categories:
            before = ReplayResult.recorded(turn)
            diffs.append(TurnDiff(turn, before, None, unknown_category=True))
            continue
        try:
            after = await runner(turn)
        except Exception as e:  # Any runner failure is a finding about that turn.
            diffs.append(compare(turn, None, error=f"{type(e).__name__}: {e}"))
            continue
        diffs.append(compare(turn, after))
    return diffs


def recorded_app(transcripts: Sequence[Transcript]) -> dict[str, Any] | None:
    """The app record of the newest turn that has one (`TurnView.app`), or `None` for a
    log written before turns recorded their app."""
    for transcript in reversed(transcripts):
        for turn in reversed(transcript.turns):
            if turn.app is not None:
                return turn.app
    return None


def recorded_categories(transcripts: Sequence[Transcript]) -> list[str]:
    """The categories the replayable turns were routed to, sorted."""
    return sorted(
        {str(t.view.category) for tr in transcripts for t in recorded_turns(tr) if t.view.category}
    )


def missing_categories(transcripts: Sequence[Transcript], known: Collection[str]) -> list[str]:
    """The recorded categories (routed to, or listed in the app record) not in `known`."""
    app = recorded_app(transcripts) or {}
    listed = app.get("categories")
    names = set(recorded_categories(transcripts))
    if isinstance(listed, dict | list):
        names |= {str(n) for n in listed}
    return sorted(names - set(known))
