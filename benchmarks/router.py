"""The router on public data sets: how many messages it routes with no model call, how
often it is right on those, and the accuracy-coverage curve over thresholds and margins.

`EmbeddingRouter("minilm")` (all-MiniLM-L6-v2 run locally) over an app whose categories
are a data set's intents with 10 training examples each (as `frontdesk eval triage`
builds it), scored on the test messages:
- **BANKING77** (77 intents; `test.csv`, 3,080 messages);
- **CLINC150** (150 intents and out-of-scope; `test` and `oos_test`, 5,500 messages: an
  out-of-scope message is right only when routed to `OTHER`).

For each message the router's best category, its cosine similarity and the runner-up's
are computed once (the messages embedded in batches); each (threshold, margin) point then
says the share of messages routed (coverage) and the share of those routed right
(precision). The data sets' folder is `--data` (or `FRONTDESK_DATASETS`), with
`banking77/` and `clinc150/` as the datasets README describes.

    python -m benchmarks.router --data DIR [--limit N]

The pipeline's own figures (accuracy, out-of-scope recall and time per message, with and
without the router, the triage expert being the offline stand-in) come from
`frontdesk eval triage DATA --model offline [--router minilm]` (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from frontdesk.experts.providers.minilm import MiniLMEmbedder, missing
from frontdesk.experts.router import (
    DEFAULT_MARGIN,
    DEFAULT_THRESHOLD,
    EmbeddingRouter,
    text_key,
)
from frontdesk.orchestrator.datasets import load_triage

THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)
MARGINS = (0.0, 0.04, 0.08, 0.12)


def scores(
    spec: str, embedder: MiniLMEmbedder, limit: int | None
) -> tuple[list[tuple[str, str, float, float]], float]:
    """Per test message: (expected, best category, best cosine, runner-up's); and the
    seconds one message's embedding and decision took (median of the batch's mean)."""
    loaded = load_triage(spec, examples=10, limit=limit)
    router = EmbeddingRouter(embedder, threshold=1.0, margin=0.0)
    texts = router.texts(loaded.categories)
    unique = sorted({t for each in texts.values() for t in each})
    vectors = dict(zip([text_key(t) for t in unique], embedder.embed_now(unique), strict=True))
    index = router.index(texts, vectors)
    messages = [row.text for row in loaded.rows]
    started = time.perf_counter()
    embedded = embedder.embed_now(messages)
    rows = []
    for row, vector in zip(loaded.rows, embedded, strict=True):
        decision = index.decide(vector)
        (top, best), (_, runner_up) = decision.scores[0], decision.scores[1]
        rows.append((row.category, top, best, runner_up))
    per_message = (time.perf_counter() - started) / max(len(messages), 1)
    return rows, per_message


def curve(rows: list[tuple[str, str, float, float]]) -> None:
    """Coverage and precision per (threshold, margin), as a Markdown table."""
    print("| threshold | " + " | ".join(f"margin {m:.2f}" for m in MARGINS) + " |")
    print("|---|" + "---|" * len(MARGINS))
    for threshold in THRESHOLDS:
        cells = []
        for margin in MARGINS:
            covered = [r for r in rows if r[2] >= threshold and r[2] - r[3] >= margin]
            right = sum(expected == top for expected, top, _, _ in covered)
            precision = f"{right / len(covered):.3f}" if covered else "-"
            mark = (
                " **(default)**"
                if (threshold, margin)
                == (
                    DEFAULT_THRESHOLD,
                    DEFAULT_MARGIN,
                )
                else ""
            )
            cells.append(f"{len(covered) / len(rows):.3f} at {precision}{mark}")
        print(f"| {threshold:.2f} | " + " | ".join(cells) + " |")


def main() -> None:
    """Measure the router on the data sets found (nothing to do without them)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.environ.get("FRONTDESK_DATASETS"))
    parser.add_argument("--limit", type=int, default=None)
    args, _ = parser.parse_known_args()
    gone = missing()
    if gone is not None:
        print(f"router not measured: {gone} (pip install 'frontdesk[router]')")
        return
    if args.data is None or not Path(args.data).is_dir():
        print("router not measured: give --data DIR (or FRONTDESK_DATASETS) with banking77/")
        return
    embedder = MiniLMEmbedder()
    for name in ("banking77", "clinc150"):
        folder = Path(args.data) / name
        if not folder.is_dir():
            continue
        rows, per_message = scores(f"{name}:{folder}", embedder, args.limit)
        print(f"\n{name}: {len(rows)} test messages; coverage at precision of the router alone")
        print(f"(embedding and deciding: {per_message * 1000:.1f} ms per message, batched)\n")
        curve(rows)


if __name__ == "__main__":
    main()
