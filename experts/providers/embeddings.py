"""Embeddings through any OpenAI-compatible `/v1/embeddings` endpoint (`openai` SDK).

Optional: knowledge search works without it (full text); given one, the knowledge retriever
combines the two rankings (`frontdesk.orchestrator.knowledge.HybridRetriever`). A failed
call is never retried here: the retriever then answers from the full text alone, so an
embeddings outage costs a turn some recall, never the turn.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Protocol

import openai

from frontdesk.errors import ConfigError, ModelAPIError, ModelConnectionError, ModelHTTPError
from frontdesk.experts.providers.base import check_allow_model_requests
from frontdesk.experts.providers.openai import PLACEHOLDER_KEY
from frontdesk.masking import mask_url

__all__ = ["Embedder", "OpenAIEmbedder", "embedder_from_spec", "normalised"]

BATCH = 64
"""Texts sent in one request at most."""


class Embedder(Protocol):
    """Turns texts into vectors; `name` says which model (vectors of two models differ)."""

    @property
    def name(self) -> str:
        """The model's name, e.g. `openai:text-embedding-3-small`."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-length vector per text, in order.

        Raises:
            ModelError: the endpoint failed or answered something unusable.
        """
        ...


def normalised(vector: Sequence[float]) -> list[float]:
    """`vector` scaled to unit length (so a dot product is the cosine)."""
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else list(vector)


class OpenAIEmbedder:
    """`client.embeddings.create` of the `openai` SDK, for OpenAI or any compatible server.

    Args:
        model: The embedding model's name, e.g. `text-embedding-3-small`.
        base_url: A compatible server's root (`http://127.0.0.1:8080/v1`); no key needed.
        api_key: Else `OPENAI_API_KEY`.
        timeout: Seconds for one request (a turn waits for the question's vector).
        client: An SDK client of your own (its retries are turned off).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 10.0,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        self.model_name = model
        if client is None:
            key = api_key or os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_KEY
            client = openai.AsyncOpenAI(api_key=key, base_url=base_url, timeout=timeout)
        self._client = client.with_options(max_retries=0, timeout=timeout)
        self._base_url = base_url

    @property
    def name(self) -> str:
        """`openai:<model>`, or `openai:<model>@<base_url>` (a password in it masked)."""
        if self._base_url:
            return f"openai:{self.model_name}@{mask_url(self._base_url)}"
        return f"openai:{self.model_name}"

    async def aclose(self) -> None:
        """Close the SDK client's HTTP connections."""
        await self._client.close()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text (in batches of `BATCH`)."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            vectors += await self._batch(list(texts[start : start + BATCH]))
        return vectors

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        check_allow_model_requests()
        try:
            answer = await self._client.embeddings.create(
                model=self.model_name, input=texts, encoding_format="float"
            )
        except openai.APIStatusError as e:
            raise ModelHTTPError(
                f"{self.name}: the embeddings endpoint answered {e.status_code}",
                status_code=e.status_code,
                model=self.name,
                headers={k.lower(): v for k, v in e.response.headers.items()},
            ) from None
        except openai.APIConnectionError as e:
            raise ModelConnectionError(
                f"{self.name}: the embeddings endpoint could not be reached ({type(e).__name__})",
                model=self.name,
            ) from None
        except openai.OpenAIError as e:
            raise ModelAPIError(f"{self.name}: {type(e).__name__}", model=self.name) from None
        data = sorted(answer.data, key=lambda d: d.index)
        if len(data) != len(texts) or any(not d.embedding for d in data):
            raise ModelAPIError(
                f"{self.name}: {len(data)} vectors for {len(texts)} texts", model=self.name
            )
        return [normalised(d.embedding) for d in data]


def embedder_from_spec(spec: str | Embedder) -> Embedder:
    """The embedder a spec names (the one place embedder specs are read).

    Args:
        spec: `"minilm"` (all-MiniLM-L6-v2, run locally: `frontdesk[router]`),
            `"openai:NAME"` (OpenAI, `OPENAI_API_KEY`), `"openai:NAME@URL"` (any
            OpenAI-compatible `/v1/embeddings`: llama.cpp's server, vLLM), or an `Embedder`.

    Raises:
        ConfigError: an unknown spec, or the minilm model not installed.
    """
    if not isinstance(spec, str):
        if not callable(getattr(spec, "embed", None)) or not isinstance(
            getattr(spec, "name", None), str
        ):
            raise ConfigError(
                f"an embedder is a spec string or has `name` and `async embed(texts)`,"
                f" not {type(spec).__name__}"
            )
        return spec
    if spec == "minilm":
        from frontdesk.experts.providers.minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    provider, sep, rest = spec.partition(":")
    if provider == "openai" and sep and rest:
        name, at, url = rest.partition("@")
        if name and (not at or url.startswith(("http://", "https://"))):
            return OpenAIEmbedder(name, base_url=url or None)
    raise ConfigError(
        f"unknown embedder {spec!r}; use 'minilm', 'openai:NAME' or 'openai:NAME@http://HOST/v1'"
    )
