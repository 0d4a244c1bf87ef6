"""OpenAIEmbedder through the real SDK against the local wire server's `/v1/embeddings`."""

from __future__ import annotations

import math

import pytest

from frontdesk.errors import ModelAPIError, ModelConnectionError, ModelHTTPError
from frontdesk.experts.providers.embeddings import BATCH, OpenAIEmbedder
from tests.experts.providers.wire_server import (
    EMBEDDINGS_PATH,
    Reply,
    WireServer,
    openai_embeddings,
    openai_error,
)

pytestmark = pytest.mark.anyio


async def test_vectors_come_back_in_order_and_of_unit_length(wire: WireServer) -> None:
    wire.script(EMBEDDINGS_PATH, Reply(body=openai_embeddings([[3.0, 4.0], [0.0, 2.0]])))
    embedder = OpenAIEmbedder("embed-test", base_url=f"{wire.url}/v1")
    try:
        vectors = await embedder.embed(["overdraft fees", "lost card"])
    finally:
        await embedder.aclose()
    assert vectors == [[0.6, 0.8], [0.0, 1.0]]
    (sent,) = wire.requests_to(EMBEDDINGS_PATH)
    assert sent.body["model"] == "embed-test"
    assert sent.body["input"] == ["overdraft fees", "lost card"]
    assert embedder.name == f"openai:embed-test@{wire.url}/v1"


async def test_many_texts_go_in_batches(wire: WireServer) -> None:
    wire.embed = lambda text: [float(len(text)), 1.0]
    embedder = OpenAIEmbedder("embed-test", base_url=f"{wire.url}/v1")
    try:
        vectors = await embedder.embed([f"text {i}" for i in range(BATCH + 3)])
    finally:
        await embedder.aclose()
    assert len(vectors) == BATCH + 3
    assert all(math.isclose(math.hypot(*v), 1.0) for v in vectors)
    assert [len(r.body["input"]) for r in wire.requests_to(EMBEDDINGS_PATH)] == [BATCH, 3]


async def test_an_error_is_typed_and_never_retried(wire: WireServer) -> None:
    wire.script(EMBEDDINGS_PATH, Reply(status=503, body=openai_error("server_error")))
    embedder = OpenAIEmbedder("embed-test", base_url=f"{wire.url}/v1", api_key="sk-test-SECRET")
    try:
        with pytest.raises(ModelHTTPError) as raised:
            await embedder.embed(["x"])
    finally:
        await embedder.aclose()
    assert raised.value.status_code == 503 and "SECRET" not in str(raised.value)
    assert len(wire.requests_to(EMBEDDINGS_PATH)) == 1


async def test_an_unreachable_endpoint_is_a_connection_error(
    closed_port_url: str, allow_model_requests: None
) -> None:
    embedder = OpenAIEmbedder("embed-test", base_url=f"{closed_port_url}/v1")
    try:
        with pytest.raises(ModelConnectionError):
            await embedder.embed(["x"])
    finally:
        await embedder.aclose()


async def test_requests_are_blocked_where_model_requests_are_off(wire: WireServer) -> None:
    from frontdesk.errors import ModelRequestsBlocked
    from frontdesk.experts.providers import base

    embedder = OpenAIEmbedder("embed-test", base_url=f"{wire.url}/v1")
    base.ALLOW_MODEL_REQUESTS = False
    try:
        with pytest.raises(ModelRequestsBlocked):
            await embedder.embed(["x"])
    finally:
        base.ALLOW_MODEL_REQUESTS = True
        await embedder.aclose()
    assert wire.requests_to(EMBEDDINGS_PATH) == []


async def test_a_short_answer_is_refused(wire: WireServer) -> None:
    wire.script(EMBEDDINGS_PATH, Reply(body=openai_embeddings([[1.0, 0.0]])))
    embedder = OpenAIEmbedder("embed-test", base_url=f"{wire.url}/v1")
    try:
        with pytest.raises(ModelAPIError, match="1 vectors for 2 texts"):
            await embedder.embed(["a", "b"])
    finally:
        await embedder.aclose()
