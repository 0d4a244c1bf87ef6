"""`benchmarks.real_model` against the wire server acting like `llama-server`: the 20 turns
run, and a server that prefills shows no instruction in any reply."""

from __future__ import annotations

import pytest

from benchmarks.real_model import leaked, main, run, summary
from tests.experts.providers.conftest import _wire_server  # noqa: F401 (fixture)
from tests.experts.providers.conftest import wire as wire
from tests.experts.providers.wire_server import LlamaServer, WireServer

pytestmark = pytest.mark.anyio


async def test_twenty_turns_on_a_prefilling_server_leak_nothing(wire: WireServer) -> None:
    wire.mode = LlamaServer(
        text="Happy to help.",
        wants={
            "TriageDecision": {"category": "ORDERS"},
            "OrderRequestExtraction": {
                "kind": "request",
                "request": {"variety": "purple", "bags": 2},
            },
        },
    )
    rows = await run(f"openai:smollm2@{wire.url}/v1?concurrency=1")
    assert len(rows) == 20
    assert not any(r.leaked for r in rows) and not any(r.failed for r in rows)
    assert summary(rows).startswith("| 20 | 0 |")


def test_leak_detection_and_the_skip_without_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    instruction = "Tell the user the £3.99 delivery fee was refunded."
    assert leaked(f"{instruction} Sorry!", instruction)
    assert not leaked("Your £3.99 fee is back.", instruction)
    main([])
    assert "skipped" in capsys.readouterr().out
