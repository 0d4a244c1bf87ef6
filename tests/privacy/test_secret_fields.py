"""Issue 40: a `Redact("drop")` field reaches its handler and nothing else, a `mask` field
shows its masked form, on every surface: the turn's answer and stream, the operator routes,
the exports, memory and summaries, later prompts, and what is stored at rest.

The scenario is a bank reviewer's: a SIM swap with a PIN (`drop`) and a phone number (`mask`),
handed to a person by its handler, handed back, then a second conversation of the same
customer; the memory expert and the summariser are fooled (they return the PIN whatever they
are sent). `frontdesk privacy audit-surfaces` counts where the PIN is left in clear.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from frontdesk import Orchestrator, Redact
from frontdesk.audit.compact import inflate_bytes
from frontdesk.cli import app as cli_app
from frontdesk.cli.privacy import route_occurrences
from frontdesk.db import create_engine, dispose_engine
from frontdesk.experts import Category, HandlerContext, Outcome
from frontdesk.service import TokenVerifier, create_app
from frontdesk.service._events import StreamTiming
from frontdesk.surfaces import occurrences_at_rest
from frontdesk.testing import FunctionModel, ModelRequest
from tests.service._server import MASTER_KEY
from tests.service.conftest import SECRET, auth

pytestmark = pytest.mark.anyio

PIN = "739164"
PHONE = "+44 7700 900123"
MASKED = "+** **** **0123"
OPERATOR = ("operator",)
ASKED = f"Please swap my SIM, my PIN is {PIN} and my number is {PHONE}"


class SimSwap(BaseModel):
    pin: Annotated[str, Redact("drop")]
    phone: Annotated[str, Redact("mask")]


class Telco:
    """The bank's handler and a model that has been fooled: every expert call is kept."""

    def __init__(self, *, handoff: bool = True) -> None:
        self.handoff = handoff
        self.calls: list[ModelRequest] = []
        self.handled: list[SimSwap] = []

    async def swap(self, request: SimSwap, context: HandlerContext) -> Outcome:
        self.handled.append(request)
        if context.memory is not None:  # A careless handler: the PIN is kept as "[PIN]".
            await context.memory.remember(f"Swap asked with PIN {request.pin}", key="swap")
        return Outcome(
            instruction=f"Say a colleague checks the swap for {request.phone} (PIN {request.pin})",
            handoff="SIM swap needs a person" if self.handoff else None,
        )

    def __call__(self, request: ModelRequest) -> Any:
        self.calls.append(request)
        said = "\n".join(m["content"] for m in request.messages)
        if request.expert == "triage":
            return {"category": "SIM_SWAP" if "SIM" in said else "OTHER", "reason": "test"}
        if request.expert == "request":
            return {"request": {"pin": PIN, "phone": PHONE}}
        if request.expert == "summariser":  # Honest, and fooled: it "remembers" the PIN.
            return f"Summary: {said} (current PIN {PIN})"
        if request.expert == "memory":  # Fooled: keeps the PIN as a fact.
            return {"facts": [{"text": f"SIM PIN is {PIN}", "key": "sim_pin"}]}
        return f"Reply to: {said[-120:]}"


def orchestrator(store: str, telco: Telco, *, confirm: bool = False, **kwargs: Any) -> Orchestrator:
    sim = Category(
        name="SIM_SWAP",
        description="Swapping a SIM card",
        request=SimSwap,
        handler=telco.swap,
        examples=["swap my SIM"],
        confirm=confirm,
    )
    return Orchestrator(
        [sim], model=FunctionModel(telco), store=store, audit_key=MASTER_KEY, **kwargs
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'telco.db'}"
    return str(request.getfixturevalue("fresh_pg_url"))


@pytest.fixture
async def served(store_url: str) -> AsyncIterator[tuple[httpx.AsyncClient, Telco, Orchestrator]]:
    telco = Telco()
    orch = orchestrator(store_url, telco)
    app = create_app(
        orch,
        verifier=TokenVerifier(secret=SECRET),
        allow_missing_idempotency_key=True,
        allow_client_conversation_ids=True,
        event_timing=StreamTiming(poll=0.05, keepalive=5.0, max_age=0.3),
        owns_orchestrator=False,
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client, telco, orch
    await orch.aclose()


def clear(found: list[Any]) -> dict[str, int]:
    return {o.place: o.count for o in found if o.count}


async def test_a_pin_given_once_is_in_clear_nowhere_but_the_handler_and_the_audit(
    served: tuple[httpx.AsyncClient, Telco, Orchestrator], store_url: str, monkeypatch: Any
) -> None:
    client, telco, orch = served
    alice = auth("alice")
    operator = auth("sam", roles=OPERATOR)

    # The turn, streamed: its events and its answer.
    stream = await client.post(
        "/v1/conversations/c-1/messages",
        json={"text": ASKED},
        headers={**alice, "Accept": "text/event-stream"},
    )
    assert stream.status_code == 200, stream.text
    assert PIN not in stream.text and PHONE not in stream.text
    assert "[PIN]" in stream.text and MASKED in stream.text  # extracted, done
    [handled] = telco.handled
    assert handled.pin == PIN and handled.phone == PHONE  # the handler got the values

    # The person answers, and hands back; the memory expert and the summariser ran.
    r = await client.post(
        "/v1/conversations/c-1/operator-messages", json={"text": "Done."}, headers=operator
    )
    assert r.status_code == 200, r.text
    r = await client.post("/v1/conversations/c-1/hand-back", headers=operator)
    assert r.status_code == 200, r.text
    await orch.drain()
    await orch._past.wait()  # type: ignore[union-attr]

    # A second conversation of the same customer: answered as JSON.
    later = await client.post(
        "/v1/conversations/c-2/messages", json={"text": "Hello again"}, headers=alice
    )
    assert later.status_code == 200 and PIN not in later.text
    await orch.drain()

    # Every later expert call, and what the fooled experts returned, holds no PIN.
    after = telco.calls[[c.expert for c in telco.calls].index("response") :]
    sent = [json.dumps([c.system, c.messages, c.memory]) for c in after]
    assert not [s for s in sent if PIN in s or PHONE in s]
    assert any("[PIN]" in s for s in sent)
    facts = [m.text for m in await orch.memories("alice")]
    assert facts and not [f for f in facts if PIN in f]
    # (The fooled memory expert's "SIM PIN is 739164" is refused by the memory policy or
    # kept as "SIM PIN is [PIN]": either way, never with the value.)
    assert "Swap asked with PIN [PIN]" in facts

    # The operator routes and the customer's own, for both conversations.
    client.headers.update(operator)
    routes = await route_occurrences(client, ["c-1", "c-2"], PIN, wait=2.0)
    assert len(routes) == 9 and clear(routes) == {}
    context = (await client.get("/v1/conversations/c-1/context")).json()
    assert MASKED in json.dumps(context) and PHONE not in json.dumps(context)
    assert context["turns"][0]["request"]["pin"] == "[PIN]"
    phone_routes = await route_occurrences(client, ["c-1", "c-2"], PHONE, wait=2.0)
    assert clear(phone_routes) == {}

    # At rest (every table, full-text included) and in the default exports: nowhere.
    assert orch.audit_log is not None
    engine = create_engine(store_url)
    try:
        assert clear(await occurrences_at_rest(engine, PIN, decode=inflate_bytes)) == {}
        assert clear(await occurrences_at_rest(engine, PHONE, decode=inflate_bytes)) == {}
        # The fooled summariser's "(current PIN 739164)" was kept with the value replaced.
        kept = clear(await occurrences_at_rest(engine, "current PIN [PIN]"))
        assert "memory.text" in kept
    finally:
        await dispose_engine(engine)
    # The audit keeps the original, encrypted under alice's key.
    rows = await orch.audit_log.events("c-1")
    assert any(PIN in json.dumps(r.payload) for r in rows)

    monkeypatch.setenv("FRONTDESK_MASTER_KEY", MASTER_KEY)
    args = ["privacy", "audit-surfaces", PIN, "--db", store_url, "-c", "c-1", "-c", "c-2"]
    out = await asyncio.to_thread(CliRunner().invoke, cli_app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    places = json.loads(out.stdout)["places"]
    assert {p["place"] for p in places} >= {
        "audit export c-1 (jsonl)",
        "audit export c-2 (jsonl)",
        "audit export c-1 (html)",
    }
    assert [p for p in places if p["count"]] == []


async def test_a_confirm_category_holds_the_pin_sealed_until_the_yes(
    store_url: str, monkeypatch: Any
) -> None:
    """The same counting for a `Category(confirm=True)`: the asking turn scrubs its message
    like any other, the request held for the yes keeps the PIN only sealed under the
    user's key, the yes opens it for the handler, and a no drops it."""
    telco = Telco(handoff=False)
    orch = orchestrator(store_url, telco, confirm=True)
    app = create_app(
        orch,
        verifier=TokenVerifier(secret=SECRET),
        allow_missing_idempotency_key=True,
        allow_client_conversation_ids=True,
        event_timing=StreamTiming(poll=0.05, keepalive=5.0, max_age=0.3),
        owns_orchestrator=False,
    )
    engine = create_engine(store_url)
    alice = auth("alice")
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                for cid in ("c-1", "c-3"):
                    asked = await client.post(
                        f"/v1/conversations/{cid}/messages",
                        json={"text": ASKED},
                        headers={**alice, "Accept": "text/event-stream"},
                    )
                    assert asked.status_code == 200, asked.text
                    assert '"awaiting_confirmation":true' in asked.text
                    assert PIN not in asked.text and PHONE not in asked.text
                assert telco.handled == []
                await orch.drain()
                # Held for the yes: in clear nowhere at rest, nor on any route.
                assert clear(await occurrences_at_rest(engine, PIN, decode=inflate_bytes)) == {}
                assert clear(await occurrences_at_rest(engine, PHONE, decode=inflate_bytes)) == {}
                transcript = await orch.transcript("c-1", user_id="alice")
                assert "[PIN]" in transcript[0].content and MASKED in transcript[0].content
                operator = {**client.headers, **auth("sam", roles=OPERATOR)}
                client.headers.update(operator)
                routes = await route_occurrences(client, ["c-1", "c-3"], PIN, wait=2.0)
                assert clear(routes) == {}
                client.headers.pop("Authorization")

                yes = await client.post(
                    "/v1/conversations/c-1/messages",
                    json={"text": "yes"},
                    headers={**alice, "Idempotency-Key": "k-yes"},
                )
                assert yes.status_code == 200 and PIN not in yes.text
                [handled] = telco.handled
                assert handled.pin == PIN and handled.phone == PHONE  # opened for the handler
                no = await client.post(
                    "/v1/conversations/c-3/messages", json={"text": "no"}, headers=alice
                )
                assert no.status_code == 200 and len(telco.handled) == 1
                await orch.drain()
                # A retry of the yes runs nothing twice (the held values are gone by now).
                again = await client.post(
                    "/v1/conversations/c-1/messages",
                    json={"text": "yes"},
                    headers={**alice, "Idempotency-Key": "k-yes"},
                )
                assert again.status_code == 200 and len(telco.handled) == 1
                assert again.json() == yes.json()
        assert clear(await occurrences_at_rest(engine, PIN, decode=inflate_bytes)) == {}
        assert clear(await occurrences_at_rest(engine, '"held"')) == {}  # released
    finally:
        await dispose_engine(engine)
        await orch.aclose()
    monkeypatch.setenv("FRONTDESK_MASTER_KEY", MASTER_KEY)
    args = ["privacy", "audit-surfaces", PIN, "--db", store_url, "-c", "c-1", "-c", "c-3"]
    out = await asyncio.to_thread(CliRunner().invoke, cli_app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    assert [p for p in json.loads(out.stdout)["places"] if p["count"]] == []


async def test_reveal_on_the_operator_routes_needs_its_role_and_is_audited(
    served: tuple[httpx.AsyncClient, Telco, Orchestrator],
) -> None:
    client, _telco, orch = served
    r = await client.post(
        "/v1/conversations/c-1/messages", json={"text": ASKED}, headers=auth("alice")
    )
    assert r.status_code == 200 and PIN not in r.text
    operator = auth("sam", roles=OPERATOR)
    revealer = auth("rae", roles=(*OPERATOR, "reveal"))
    for route in ("context", "transcript"):
        url = f"/v1/conversations/c-1/{route}"
        assert (
            await client.get(url, headers=operator, params={"reveal": "true"})
        ).status_code == 403
        customer = await client.get(url, headers=auth("alice"), params={"reveal": "true"})
        assert customer.status_code in (403, 404)
        plain = await client.get(url, headers=revealer)
        assert plain.status_code == 200 and PIN not in plain.text  # Only when asked.
        shown = await client.get(url, headers=revealer, params={"reveal": "true"})
        assert shown.status_code == 200 and PIN in shown.text and PHONE in shown.text
    context = (
        await client.get("/v1/conversations/c-1/context", headers=revealer, params={"reveal": 1})
    ).json()
    assert context["turns"][0]["request"] == {"pin": PIN, "phone": PHONE}
    assert orch.audit_log is not None
    shows = [e.payload for e in await orch.audit_log.events("c-1") if e.kind == "revealed"]
    assert [s["view"] for s in shows] == ["context", "transcript", "context"]
    assert {s["by"] for s in shows} == {"operator:rae"}


async def test_a_retry_of_a_scrubbed_turn_finds_its_outcome(store_url: str) -> None:
    telco = Telco(handoff=False)
    failing = {"response": 1}
    answer = telco.__call__

    def flaky(request: ModelRequest) -> Any:
        if request.expert == "response" and failing["response"]:
            failing["response"] -= 1
            raise RuntimeError("the response model is down")
        return answer(request)

    sim = Category(
        name="SIM_SWAP", description="Swapping a SIM", request=SimSwap, handler=telco.swap
    )
    orch = Orchestrator([sim], model=FunctionModel(flaky), store=store_url, memory=False)
    try:
        with pytest.raises(Exception, match="down"):
            await orch.handle("c-9", ASKED, user_id="bob", client_message_id="m-1")
        [stored, failed] = await orch.transcript("c-9", user_id="bob")
        assert failed.kind == "failed"
        assert PIN not in stored.content and "[PIN]" in stored.content  # kept scrubbed
        reply = await orch.handle("c-9", ASKED, user_id="bob", client_message_id="m-1")
        again = await orch.handle("c-9", ASKED, user_id="bob", client_message_id="m-1")
        assert len(telco.handled) == 1  # the handler ran once
        assert reply.request is not None and reply.request.pin == "[PIN]"  # type: ignore[attr-defined]
        assert again.replayed and again.message_id == reply.message_id
        with pytest.raises(Exception, match="different text"):
            await orch.handle("c-9", "Another text", user_id="bob", client_message_id="m-1")
    finally:
        await orch.aclose()


async def test_scrub_secrets_off_keeps_the_message_but_not_the_views(store_url: str) -> None:
    telco = Telco()
    orch = orchestrator(store_url, telco, scrub_secrets=False, memory=False)
    app = create_app(
        orch,
        verifier=TokenVerifier(secret=SECRET),
        allow_missing_idempotency_key=True,
        allow_client_conversation_ids=True,
        event_timing=StreamTiming(poll=0.05, keepalive=5.0, max_age=0.3),
        owns_orchestrator=False,
    )
    try:
        reply = await orch.handle("c-5", ASKED, user_id="carol")
        assert reply.request is not None and reply.request.pin == "[PIN]"  # type: ignore[attr-defined]
        assert reply.request.phone == MASKED  # type: ignore[attr-defined]
        [question, *_] = await orch.transcript("c-5", user_id="carol")
        assert question.content == ASKED  # stored as written
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            operator = auth("sam", roles=OPERATOR)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://test", headers=operator
            ) as client:
                routes = await route_occurrences(client, ["c-5"], PIN, wait=2.0)
                assert clear(routes) == {}  # the routes show the rules all the same
                transcript = (await client.get("/v1/conversations/c-5/transcript")).text
                assert "[PIN]" in transcript and MASKED in transcript
    finally:
        await orch.aclose()


async def test_erasure_deletes_the_kept_values(store_url: str) -> None:
    telco = Telco()
    orch = orchestrator(store_url, telco, memory=False)
    try:
        await orch.handle("c-7", ASKED, user_id="dave")
        report = await orch.erase_user("dave")
        assert report.ruled_values == 2  # the PIN's and the phone's digests
        assert orch.audit_log is not None
        rows = await orch.audit_log.events("c-7")
        assert not any(PIN in json.dumps(r.payload) for r in rows)  # shredded
    finally:
        await orch.aclose()


def test_audit_surfaces_counts_what_it_finds(tmp_path: Path) -> None:
    """The tool itself, against a store where the value is in clear (`scrub_secrets=False`,
    no master key): it names the message table, the audit rows and the raw export."""
    url = f"sqlite:///{tmp_path / 'clear.db'}"
    telco = Telco()

    async def record() -> None:
        sim = Category(name="SIM_SWAP", description="SIM", request=SimSwap, handler=telco.swap)
        orch = Orchestrator(
            [sim], model=FunctionModel(telco), store=url, scrub_secrets=False, memory=False
        )
        await orch.handle("c-3", ASKED, user_id="erin")
        await orch.aclose()

    asyncio.run(record())
    out = CliRunner().invoke(cli_app, ["privacy", "audit-surfaces", PIN, "--db", url])
    assert out.exit_code == 0, out.output
    assert "message.content" in out.stdout and "audit_" in out.stdout
    assert "audit export c-3 (jsonl)" in out.stdout
    lines = {line[8:]: line[:6].strip() for line in out.stdout.splitlines()[:-1]}
    assert lines["audit export c-3 (jsonl)"] == "-"  # the default redaction holds there
    assert lines["message.content"] == "1" and lines["audit_event.payload_json"] != "-"
    assert "in clear in" in out.stdout.splitlines()[-1]
    # `--reveal` shows everything, and the conversation's chain records who was shown it.
    shown = CliRunner().invoke(cli_app, ["audit", "show", "c-3", "--reveal", "--db", url])
    assert shown.exit_code == 0 and PIN in shown.stdout
    export = tmp_path / "c-3.jsonl"
    done = CliRunner().invoke(cli_app, ["audit", "export", "c-3", "-o", str(export), "--db", url])
    assert done.exit_code == 0, done.output
    rows = [json.loads(line) for line in export.read_text(encoding="utf-8").splitlines()]
    [revealed] = [r for r in rows if r["kind"] == "revealed"]
    assert revealed["payload"]["view"] == "audit show" and revealed["payload"]["by"]
    verified = CliRunner().invoke(cli_app, ["audit", "verify", "c-3", "--db", url])
    assert verified.exit_code == 0, verified.output
