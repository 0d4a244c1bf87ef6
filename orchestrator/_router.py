"""An `EmbeddingRouter` bound to a profile's categories and the store's kept vectors (the
state `routing.py` routes with; a `Pipeline` carries one)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from frontdesk.experts.category import Category
from frontdesk.experts.router import EmbeddingRouter, RouteDecision, RouterIndex, text_key
from frontdesk.threads.routing import CategoryVectors

log = structlog.get_logger("frontdesk.orchestrator")


@dataclass(kw_only=True)
class Router:
    """An `EmbeddingRouter` bound to one profile's categories and the store's vectors."""

    router: EmbeddingRouter
    vectors: CategoryVectors | None
    """Where the vectors are kept (`None`: embedded in this process only, e.g. a replay)."""
    texts: Mapping[str, tuple[str, ...]]
    _index: RouterIndex | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    def bind(
        cls,
        router: EmbeddingRouter,
        vectors: CategoryVectors | None,
        categories: Sequence[Category],
    ) -> Router:
        """`router` over `categories`, its vectors kept by `vectors`."""
        return cls(router=router, vectors=vectors, texts=router.texts(categories))

    async def index(self) -> RouterIndex:
        """The categories' vectors: read from the store on the first route, the texts
        without one (new or changed examples) embedded and kept."""
        if self._index is not None:
            return self._index
        async with self._lock:
            if self._index is None:
                name = self.router.embedder.name
                keys = {text_key(t): t for each in self.texts.values() for t in each}
                kept = {} if self.vectors is None else await self.vectors.read(name, list(keys))
                fresh = [k for k in keys if k not in kept]
                if fresh:
                    made = await self.router.embedder.embed([keys[k] for k in fresh])
                    new = dict(zip(fresh, made, strict=True))
                    if self.vectors is not None:
                        await self.vectors.save(name, new)
                    kept.update(new)
                    log.info("router.embedded", embedder=name, texts=len(fresh))
                self._index = self.router.index(self.texts, kept)
            return self._index

    async def decide(self, text: str) -> RouteDecision:
        """The router's decision on one message.

        Raises:
            ModelError: the embedder failed.
        """
        index = await self.index()
        (vector,) = await self.router.embedder.embed([text])
        return index.decide(vector)
