"""`GET /metrics` (Prometheus text, no token) and the HTTP server spans over a turn."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from frontdesk.service import TokenBucket
from frontdesk.service._limits import RateLimit
from tests._otel import board, recorded_spans
from tests.service import _shop
from tests.service.conftest import Api, auth, open_api

pytestmark = pytest.mark.anyio


Scrape = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Scrape:
    """Every sample of a scrape, by name and labels (parsed by prometheus_client)."""
    found: Scrape = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, frozenset(s.labels.items()))] = s.value
    return found


def total(scrape: Scrape, name: str, **labels: str) -> float:
    want = set(labels.items())
    return float(sum(v for (n, ls), v in scrape.items() if n == name and want <= ls))


async def scrape(api: Api) -> Scrape:
    r = await api.client.get("/metrics")  # no token
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return samples(r.text)


async def test_metrics_move_after_a_turn(api: Api) -> None:
    before = await scrape(api)
    cid = api.cid()
    r = await api.client.post(
        f"/v1/conversations/{cid}/messages", json={"text": "count one"}, headers=auth("u1")
    )
    assert r.status_code == 200, r.text
    after = await scrape(api)

    def moved(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert moved("frontdesk_turns_total", frontdesk_category="COUNT", frontdesk_outcome="answered")
    assert moved("frontdesk_turn_duration_seconds_count", frontdesk_outcome="answered") == 1
    for expert in ("triage", "request", "response"):
        assert (
            moved(
                "gen_ai_client_token_usage_count",
                frontdesk_expert=expert,
                gen_ai_token_type="input",
                gen_ai_operation_name="chat",
                gen_ai_provider_name="function",
            )
            == 1
        )
        assert moved("gen_ai_client_operation_duration_seconds_count", frontdesk_expert=expert) == 1
    assert moved("gen_ai_client_token_usage_count", gen_ai_token_type="output") == 3
    assert total(after, "frontdesk_store_up") == 1
    assert total(after, "frontdesk_handoff_queue_length") >= 0


async def test_a_streamed_turn_counts_its_time_to_first_token(api: Api) -> None:
    name = "frontdesk_turn_time_to_first_token_seconds_count"
    before = total(await scrape(api), name)
    r = await api.client.post(
        f"/v1/conversations/{api.cid()}/messages",
        json={"text": "stream this"},
        headers={**auth("u5"), "Accept": "text/event-stream"},
    )
    assert r.status_code == 200 and "event: delta" in r.text
    assert total(await scrape(api), name) == before + 1


async def test_the_handoff_queue_is_read_at_each_scrape(api: Api) -> None:
    before = total(await scrape(api), "frontdesk_handoff_queue_length")
    cid = api.cid()
    r = await api.client.post(
        f"/v1/conversations/{cid}/messages", json={"text": "a person please"}, headers=auth("u2")
    )
    assert r.status_code == 200 and r.json()["handoff"] is True
    after = await scrape(api)
    assert total(after, "frontdesk_handoff_queue_length") == before + 1
    assert total(after, "frontdesk_handoff_longest_wait_seconds") >= 0.0
    assert total(after, "frontdesk_turns_total", frontdesk_outcome="handoff") >= 1


async def test_rate_limit_refusals_are_counted(tmp_path: Any) -> None:
    orch = _shop.build(f"sqlite:///{tmp_path / 'limited.db'}")
    async for api in open_api(orch, limiter=TokenBucket(RateLimit(1, 3600))):
        before = total(await scrape(api), "frontdesk_rate_limited_requests_total")
        url = f"/v1/conversations/{api.cid()}/thread"
        statuses = [(await api.client.get(url, headers=auth("u3"))).status_code for _ in range(3)]
        assert statuses.count(429) == 2
        after = total(await scrape(api), "frontdesk_rate_limited_requests_total")
        assert after - before == 2


class _Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: decodes each protobuf body it is sent."""

    received: ClassVar[list[ExportTraceServiceRequest]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        type(self).received.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(b"")

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def receiver() -> Iterator[str]:
    _Receiver.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()


async def test_one_trace_runs_from_the_http_request_to_the_model_calls_over_otlp(
    api: Api, receiver: str
) -> None:
    exporter = OTLPSpanExporter(endpoint=receiver, timeout=5)
    with recorded_spans() as memory, board().plugged(exporter):
        r = await api.client.post(
            f"/v1/conversations/{api.cid()}/messages", json={"text": "count it"}, headers=auth("u4")
        )
        assert r.status_code == 200, r.text
    exporter.shutdown()  # type: ignore[no-untyped-call]

    spans = [
        span
        for request in _Receiver.received
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    attributes = {s.span_id: {a.key: a.value for a in s.attributes} for s in spans}
    server = next(s for s in spans if s.name == "POST /v1/conversations/{conversation_id}/messages")
    (turn,) = [s for s in spans if s.name == "frontdesk.turn"]
    chats = [s for s in spans if s.name == "chat function" and s.parent_span_id == turn.span_id]
    assert [attributes[s.span_id]["frontdesk.expert"].string_value for s in chats] == [
        "triage",
        "request",
        "response",
    ]
    assert not server.parent_span_id and turn.parent_span_id == server.span_id
    assert {s.trace_id for s in [server, turn, *chats]} == {server.trace_id}
    decoded = attributes[chats[0].span_id]
    assert decoded["gen_ai.operation.name"].string_value == "chat"
    assert decoded["gen_ai.provider.name"].string_value == "function"
    assert decoded["gen_ai.request.model"].string_value == "function"
    assert decoded["gen_ai.usage.input_tokens"].int_value >= 0
    sent = {int.from_bytes(s.span_id, "big") for s in spans}  # the same spans both ways
    assert {s.context.span_id for s in memory.get_finished_spans() if s.context} <= sent
