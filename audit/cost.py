"""Cost reports: tokens and USD per expert, per turn and in total, from the audit rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from frontdesk.audit.pricing import Cost
from frontdesk.audit.transcript import Tokens, Transcript


@dataclass
class CostLine:
    """Tokens and cost of a group of expert calls."""

    label: str
    calls: int = 0
    attempts: int = 0
    tokens: Tokens = field(default_factory=Tokens)
    usd: float = 0.0
    unknown_models: set[str] = field(default_factory=set)

    def add(self, tokens: Tokens, cost: Cost, model: str, attempts: int) -> None:
        """Count one expert call."""
        self.calls += 1
        self.attempts += attempts
        self.tokens = self.tokens + tokens
        self.usd += cost.usd
        if not cost.known:
            self.unknown_models.add(model)


@dataclass
class CostReport:
    """Per expert, per turn and total cost of one or more conversations."""

    by_expert: dict[str, CostLine]
    by_turn: list[CostLine]
    total: CostLine

    @property
    def unknown_models(self) -> set[str]:
        """Models priced 0 because the price table does not list them."""
        return self.total.unknown_models


def cost_report(transcripts: Sequence[Transcript]) -> CostReport:
    """Add up every call of every turn (branches included: they were paid for)."""
    by_expert: dict[str, CostLine] = {}
    by_turn: list[CostLine] = []
    total = CostLine("total")
    many = len(transcripts) > 1
    for transcript in transcripts:
        numbered = [(f"#{n}", t) for n, t in enumerate(transcript.turns, start=1)]
        numbered += [("compaction", t) for t in transcript.compactions]
        for number, turn in numbered:
            label = f"{transcript.conversation_id} {number}" if many else f"{number} {turn.turn_id}"
            line = CostLine(label)
            for call in turn.calls:
                for target in (
                    line,
                    total,
                    by_expert.setdefault(call.expert, CostLine(call.expert)),
                ):
                    target.add(call.tokens, call.cost, call.model, len(call.attempts))
            by_turn.append(line)
    return CostReport(dict(sorted(by_expert.items())), by_turn, total)
