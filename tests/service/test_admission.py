"""Admission control: a worker runs at most `max_turns` turns at once; one more waits at
most `queue_seconds` and is then answered 503 with `Retry-After` before anything of it is
stored, so a retry with the same Idempotency-Key runs it once. Reads, live events, metrics
and operator routes are never limited."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from frontdesk import Orchestrator
from frontdesk.db import create_engine
from frontdesk.errors import ConfigError
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.service import ServiceSettings
from frontdesk.service._admission import Admission, TurnGate
from tests.service import _shop
from tests.service.conftest import SECRET, Api, auth, open_api
from tests.service.test_api import sse
from tests.service.test_telemetry import samples, total

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

STREAM = {"Accept": "text/event-stream"}


@dataclass
class HeldReplies:
    """The shop's model, whose response expert waits until `release` is set: the turns it
    answers stay in flight for as long as a test needs."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    held: int = 0

    async def __call__(self, request: ModelRequest) -> Any:
        if request.expert == "response":
            self.held += 1
            await self.release.wait()
        return _shop.answer(request)

    async def until_held(self, turns: int) -> None:
        """Wait until `turns` turns wait for their reply (each is in flight)."""
        deadline = time.monotonic() + 30
        while self.held < turns:
            assert time.monotonic() < deadline, f"{self.held} of {turns} turns in flight"
            await asyncio.sleep(0.01)


@pytest.fixture
def held() -> HeldReplies:
    return HeldReplies()


def held_shop(store: str, model: HeldReplies) -> Orchestrator:
    return Orchestrator(
        [_shop.COUNT, _shop.SEND],
        model=FunctionModel(model, chunk_chars=4),
        store=store,
        lock_timeout=30.0,
    )


async def limited_api(store: str, model: HeldReplies, admission: Admission) -> AsyncIterator[Api]:
    async for api in open_api(held_shop(store, model), admission=admission):
        yield api


def gate_of(api: Api) -> TurnGate:
    gate = api.app.state.service.gate
    assert isinstance(gate, TurnGate)
    return gate


async def message(api: Api, cid: str, text: str, key: str, **headers: str) -> httpx.Response:
    return await api.client.post(
        f"/v1/conversations/{cid}/messages",
        json={"text": text},
        headers={**auth("u1"), "Idempotency-Key": key, **headers},
    )


async def queued_turn(api: Api) -> asyncio.Task[httpx.Response]:
    """A second turn ("hello again", key k-2), sent once the first holds the only place,
    returned when it is waiting in the queue."""
    queued = asyncio.create_task(message(api, api.cid(), "hello again", "k-2"))
    deadline = time.monotonic() + 10
    while gate_of(api).waiting < 1:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    return queued


async def all_places_free(api: Api) -> bool:
    """Whether every place is given back (a stream's turn gives its place back as its task
    ends, a moment after its answer)."""
    for _ in range(100):
        if gate_of(api).in_flight == 0:
            return True
        await asyncio.sleep(0.01)
    return False


async def refused_count(api: Api, route: str) -> float:
    r = await api.client.get("/metrics")
    assert r.status_code == 200, r.text
    return total(samples(r.text), "frontdesk_turns_refused_total", frontdesk_route=route)


async def test_at_the_limit_the_next_turn_is_503_at_once_and_runs_once_on_retry(
    store_url: str, held: HeldReplies
) -> None:
    admission = Admission(max_turns=2, queue_seconds=0.2)
    async for api in limited_api(store_url, held, admission):
        first, second, third = api.cid(), api.cid(), api.cid()
        as_json = asyncio.create_task(message(api, first, "count one", "k-1"))
        streamed = asyncio.create_task(message(api, second, "count two", "k-2", **STREAM))
        await held.until_held(2)
        assert gate_of(api).in_flight == 2
        refused_before = {r: await refused_count(api, r) for r in ("json", "stream")}

        with capture_logs() as logs:
            started = time.monotonic()
            busy = await message(api, third, "count three", "k-3")
            waited = time.monotonic() - started
            busy_stream = await message(api, third, "count three", "k-3", **STREAM)
        assert busy.status_code == busy_stream.status_code == 503, busy.text
        assert waited < 2.0  # the queue time (0.2 s), not the pool's 30 s
        assert busy.headers["retry-after"] == "1"
        body = busy.json()
        assert body["type"] == "ServiceBusy" and body["retry_after"] == 1
        assert "not taken" in body["detail"] and "same Idempotency-Key" in body["detail"]
        assert busy_stream.headers["content-type"].startswith("application/json")
        # Logged (a burst as one line a second) and counted, by route.
        refusals = [e for e in logs if e["event"] == "turn.refused"]
        assert refusals[0]["route"] == "json" and refusals[0]["refused"] == 1
        assert refusals[0]["in_flight"] == 2 and refusals[0]["max_turns"] == 2
        assert await refused_count(api, "json") == refused_before["json"] + 1
        assert await refused_count(api, "stream") == refused_before["stream"] + 1

        # The refused message never started: no conversation, no message, no handler run.
        assert await api.orch.store.conversation(third) is None
        # Reads, operator routes and metrics are not limited while the turns run.
        thread = await api.client.get(f"/v1/conversations/{first}/thread", headers=auth("u1"))
        assert thread.status_code == 200
        operator = auth("op", roles=("operator",))  # Minted now: a token made at import expires.
        assert (await api.client.get("/v1/handoffs", headers=operator)).status_code == 200
        assert (await api.client.get(f"/v1/conversations/{first}", headers=operator)).is_success

        # The turns in flight complete.
        held.release.set()
        done_json, done_stream = await as_json, await streamed
        assert done_json.status_code == 200 and done_json.json()["text"] == "You said: count one."
        events = sse(done_stream.text)
        assert events[-1][0] == "done" and events[-1][1]["text"] == "You said: count two."
        assert await all_places_free(api)

        # The retry with the same key runs the turn once; another retry replays it.
        retry = await message(api, third, "count three", "k-3")
        assert retry.status_code == 200, retry.text
        again = await message(api, third, "count three", "k-3")
        assert again.json()["message_id"] == retry.json()["message_id"]
        transcript = await api.orch.transcript(third, user_id="u1")
        assert [(m.role, m.content) for m in transcript] == [
            ("user", "count three"),
            ("assistant", "You said: count three."),
        ]
        assert await all_places_free(api)


async def test_a_turn_over_the_limit_waits_for_a_place_within_the_queue_time(
    tmp_path: Any, held: HeldReplies
) -> None:
    admission = Admission(max_turns=1, queue_seconds=20)
    async for api in limited_api(f"sqlite:///{tmp_path / 'a.db'}", held, admission):
        running = asyncio.create_task(message(api, api.cid(), "hello", "k-1"))
        await held.until_held(1)
        queued = await queued_turn(api)
        assert gate_of(api).in_flight == 1 and not queued.done()
        held.release.set()  # The first ends: the queued turn takes its place.
        assert (await running).status_code == 200
        assert (await queued).status_code == 200
        assert gate_of(api).in_flight == gate_of(api).waiting == 0


async def test_edit_and_regenerate_are_limited_and_errors_give_the_place_back(
    tmp_path: Any, held: HeldReplies
) -> None:
    held.release.set()
    admission = Admission(max_turns=1, queue_seconds=0)
    async for api in limited_api(f"sqlite:///{tmp_path / 'a.db'}", held, admission):
        cid = api.cid()
        first = await message(api, cid, "hello", "k-1")
        assert first.status_code == 200
        asked, answered = first.json()["user_message_id"], first.json()["message_id"]
        # Errors inside the limit (a reused key, a stream of one) give their place back.
        conflict = await message(api, cid, "other words", "k-1")
        conflict_stream = await message(api, cid, "other words", "k-1", **STREAM)
        assert conflict.status_code == conflict_stream.status_code == 409
        assert await all_places_free(api)

        held.release.clear()
        running = asyncio.create_task(message(api, api.cid(), "hello", "k-2"))
        await held.until_held(2)
        base = f"/v1/conversations/{cid}/messages"
        edit = await api.client.post(
            f"{base}/{asked}/edit", json={"text": "hi"}, headers=auth("u1")
        )
        regenerate = await api.client.post(f"{base}/{answered}/regenerate", headers=auth("u1"))
        assert edit.status_code == regenerate.status_code == 503
        assert edit.json()["type"] == regenerate.json()["type"] == "ServiceBusy"
        held.release.set()
        assert (await running).status_code == 200
        after = await api.client.post(f"{base}/{answered}/regenerate", headers=auth("u1"))
        assert after.status_code == 200, after.text
        assert await all_places_free(api)


async def test_the_default_limit_is_twice_the_store_pool(tmp_path: Any) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'a.db'}")
    try:
        assert Admission().limit_for(engine) == 30  # SQLAlchemy's pool: 5 + 10 overflow
        assert Admission(max_turns=7).limit_for(engine) == 7
    finally:
        await engine.dispose()
    bigger = create_engine(f"sqlite:///{tmp_path / 'b.db'}", pool_size=20, max_overflow=0)
    try:
        assert Admission().limit_for(bigger) == 40
    finally:
        await bigger.dispose()


def test_settings_read_and_check_the_limit() -> None:
    env = {"FRONTDESK_JWT_SECRET": SECRET}
    assert ServiceSettings.from_env(env).admission == Admission()
    given = {**env, "FRONTDESK_MAX_TURNS": "12", "FRONTDESK_TURN_QUEUE_SECONDS": "0.5"}
    assert ServiceSettings.from_env(given).admission == Admission(max_turns=12, queue_seconds=0.5)
    bad = {**env, "FRONTDESK_MAX_TURNS": "0", "FRONTDESK_TURN_QUEUE_SECONDS": "600"}
    with pytest.raises(ConfigError) as found:
        ServiceSettings.from_env(bad)
    assert "FRONTDESK_MAX_TURNS='0'" in str(found.value)
    assert "FRONTDESK_TURN_QUEUE_SECONDS='600'" in str(found.value)
    with pytest.raises(ConfigError, match="max_turns must be at least 1"):
        Admission(max_turns=0)


async def test_a_burst_past_the_queue_is_refused_without_waiting(
    tmp_path: Any, held: HeldReplies
) -> None:
    """One turn in flight and one waiting (the queue holds as many as the limit): the next
    is refused at once, not after the queue time."""
    admission = Admission(max_turns=1, queue_seconds=30)
    async for api in limited_api(f"sqlite:///{tmp_path / 'a.db'}", held, admission):
        running = asyncio.create_task(message(api, api.cid(), "hello", "k-1"))
        await held.until_held(1)
        queued = await queued_turn(api)
        started = time.monotonic()
        busy = await message(api, api.cid(), "and again", "k-3")
        assert busy.status_code == 503 and time.monotonic() - started < 5.0
        held.release.set()
        assert (await running).status_code == (await queued).status_code == 200


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("FRONTDESK_MAX_BODY_BYTES", "1023"),
        ("FRONTDESK_MAX_BODY_BYTES", "lots"),
        ("FRONTDESK_EVENT_STREAM_SECONDS", "nan"),
        ("FRONTDESK_EVENT_STREAM_SECONDS", "0.5"),
        ("FRONTDESK_MAX_TURNS", "2.5"),
        ("FRONTDESK_TURN_QUEUE_SECONDS", "inf"),
        ("FRONTDESK_TURN_QUEUE_SECONDS", "-1"),
    ],
)
def test_a_number_setting_out_of_its_range_is_named(name: str, raw: str) -> None:
    with pytest.raises(ConfigError) as found:
        ServiceSettings.from_env({"FRONTDESK_JWT_SECRET": SECRET, name: raw})
    assert f"{name}={raw!r}" in str(found.value)


def test_every_bad_number_setting_is_reported_at_once_and_good_ones_are_read() -> None:
    env = {"FRONTDESK_JWT_SECRET": SECRET}
    good = ServiceSettings.from_env(
        {**env, "FRONTDESK_MAX_BODY_BYTES": "4096", "FRONTDESK_EVENT_STREAM_SECONDS": "90"}
    )
    assert (good.max_body_bytes, good.event_timing.max_age) == (4096, 90.0)
    bad = {
        **env,
        "FRONTDESK_MAX_BODY_BYTES": "12",
        "FRONTDESK_EVENT_STREAM_SECONDS": "never",
        "FRONTDESK_MAX_TURNS": "many",
        "FRONTDESK_TURN_QUEUE_SECONDS": "61",
    }
    with pytest.raises(ConfigError) as found:
        ServiceSettings.from_env(bad)
    for name, raw in bad.items():
        if name != "FRONTDESK_JWT_SECRET":
            assert f"{name}={raw!r}" in str(found.value)
