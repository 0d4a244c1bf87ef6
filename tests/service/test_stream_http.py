"""SSE over a real socket (uvicorn): events arrive as the model writes, and a client that
goes away mid-stream does not lose the turn (the reply is stored; a retry replays it)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from frontdesk import Orchestrator
from frontdesk.experts.providers import FunctionModel, Latency, LatencyModel
from frontdesk.service import TokenVerifier, create_app
from tests.service import _shop
from tests.service._server import serve_thread
from tests.service.conftest import SECRET, auth

pytestmark = pytest.mark.timeout(60)

TEXT = "count the bags of purple potatoes in the cellar"
REPLY = f"You said: {TEXT}."


@pytest.fixture
def slow_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The test shop whose response expert writes 25 tokens a second (about 2.3 s here)."""
    monkeypatch.setenv(_shop.RUNS_ENV, str(tmp_path / "runs.log"))
    model = LatencyModel(
        FunctionModel(_shop.answer, chunk_chars=8),
        {"response": Latency(ttft=0.05, tokens_per_second=25.0)},
        chars_per_token=2.0,
    )
    orch = Orchestrator([_shop.COUNT], model=model, store=f"sqlite:///{tmp_path / 's.db'}")
    app = create_app(
        orch,
        verifier=TokenVerifier(secret=SECRET),
        owns_orchestrator=True,
        allow_client_conversation_ids=True,
    )
    with serve_thread(app) as url:
        yield url


def stream(client: httpx.Client, cid: str, key: str) -> httpx.Response:
    return client.send(
        client.build_request(
            "POST",
            f"/v1/conversations/{cid}/messages",
            json={"text": TEXT},
            headers={**auth("u1"), "Accept": "text/event-stream", "Idempotency-Key": key},
        ),
        stream=True,
    )


def test_deltas_arrive_while_the_model_writes(slow_url: str) -> None:
    with httpx.Client(base_url=slow_url, timeout=30) as client:
        response = stream(client, "c-live", "k-1")
        seen: dict[str, float] = {}
        for line in response.iter_lines():
            if line.startswith("event: "):
                seen.setdefault(line[7:], time.monotonic())
        response.close()
    assert list(seen) == ["routed", "extracted", "delta", "done"]
    assert seen["done"] - seen["delta"] > 1.0  # not buffered to the end


def test_a_client_gone_mid_stream_still_gets_its_reply_stored(
    slow_url: str, tmp_path: Path
) -> None:
    with httpx.Client(base_url=slow_url, timeout=30) as client:
        response = stream(client, "c-gone", "k-1")
        for line in response.iter_lines():
            if line.startswith("event: delta"):
                break
        response.close()  # the client goes away after the first delta

        deadline = time.monotonic() + 15
        while True:
            transcript = client.get("/v1/conversations/c-gone/transcript", headers=auth("u1"))
            messages = transcript.json()["messages"]
            if len(messages) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert [m["content"] for m in messages] == [TEXT, REPLY]

        again = client.post(
            "/v1/conversations/c-gone/messages",
            json={"text": TEXT},
            headers={**auth("u1"), "Idempotency-Key": "k-1"},
        )
        assert again.status_code == 200 and again.json()["text"] == REPLY
    assert (tmp_path / "runs.log").read_text().count("c-gone") == 1  # the handler ran once
