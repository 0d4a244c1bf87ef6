"""The router's figures in `frontdesk eval triage`: how many messages it routes with no
triage call, how often it is right on those, and its accuracy-coverage curve.

Each scored row keeps the router's best category, its similarity and the runner-up's
(`RouterScore`), whether or not the router routed it; so the curve over thresholds (at
the router's margin) is computed from one run, with no second pass over the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from frontdesk.experts.router import RouteDecision

CURVE = tuple(round(0.30 + 0.05 * i, 2) for i in range(14))
"""The thresholds the curve is read at (0.30 to 0.95)."""


@dataclass(frozen=True)
class RouterScore:
    """What the router made of one row."""

    top: str
    best: float
    runner_up: float
    routed: bool

    @classmethod
    def of(cls, decision: RouteDecision) -> RouterScore:
        """A decision's figures."""
        scores = decision.scores
        runner_up = scores[1][1] if len(scores) > 1 else -1.0
        return cls(scores[0][0], scores[0][1], runner_up, decision.category is not None)


@dataclass(frozen=True)
class CurvePoint:
    """The router alone at one threshold: the share of rows it routes, and the share of
    those it routes right."""

    threshold: float
    coverage: float
    precision: float | None


@dataclass(frozen=True)
class RouterFigures:
    """The router's part of a triage evaluation."""

    embedder: str
    threshold: float
    margin: float
    routed_share: float
    """Rows routed with no triage call."""
    routed_precision: float | None
    """Of those, the share routed to the row's category (`None`: none was routed)."""
    curve: list[CurvePoint]

    def to_json(self) -> dict[str, Any]:
        """The figures as JSON."""
        return asdict(self)

    def text(self) -> str:
        """Lines for a terminal: the run's point, then the curve."""
        precision = "-" if self.routed_precision is None else f"{self.routed_precision:.3f}"
        lines = [
            f"router {self.embedder} (threshold {self.threshold}, margin {self.margin}):"
            f" routed without a triage call {self.routed_share:.3f}, precision {precision}",
            "  threshold  coverage  precision",
        ]
        for p in self.curve:
            shown = "-" if p.precision is None else f"{p.precision:.3f}"
            lines.append(f"  {p.threshold:>9.2f}  {p.coverage:>8.3f}  {shown:>9}")
        return "\n".join(lines)


def router_figures(
    scored: Sequence[tuple[str, RouterScore]], *, embedder: str, threshold: float, margin: float
) -> RouterFigures:
    """The figures of rows scored by the router: (expected category, its score) each."""
    n = len(scored)
    routed = [(expected, s) for expected, s in scored if s.routed]
    return RouterFigures(
        embedder=embedder,
        threshold=threshold,
        margin=margin,
        routed_share=len(routed) / n if n else 0.0,
        routed_precision=_precision(routed),
        curve=[_point(scored, t, margin) for t in CURVE],
    )


def _point(
    scored: Sequence[tuple[str, RouterScore]], threshold: float, margin: float
) -> CurvePoint:
    covered = [
        (expected, s)
        for expected, s in scored
        if s.best >= threshold and s.best - s.runner_up >= margin
    ]
    return CurvePoint(
        threshold=threshold,
        coverage=len(covered) / len(scored) if scored else 0.0,
        precision=_precision(covered),
    )


def _precision(rows: Sequence[tuple[str, RouterScore]]) -> float | None:
    return sum(s.top == expected for expected, s in rows) / len(rows) if rows else None
