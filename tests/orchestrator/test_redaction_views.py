"""Redaction end to end: the models and the stores get what the user wrote; `audit show`,
the HTML and JSONL exports and the logs do not show it."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
import structlog
from pydantic import BaseModel, Field
from structlog.testing import LogCapture
from typer.testing import CliRunner

from frontdesk import Redact, RedactionPolicy, Redactor
from frontdesk.audit import redact_rows
from frontdesk.cli import app
from frontdesk.experts import Category, HandlerContext, Outcome
from frontdesk.logs import RedactingProcessor
from frontdesk.orchestrator import Orchestrator
from frontdesk.redaction import SECRET_ENV
from tests.experts.providers.wire_server import (
    ANTHROPIC_PATH,
    Reply,
    WireServer,
    anthropic_text,
    anthropic_tool,
)
from tests.orchestrator.conftest import FakeTeam

runner = CliRunner()

CARD = "4111 1111 1111 1111"
IBAN = "GB82 WEST 1234 5698 7654 32"
EMAIL = "priya@example.com"
PHONE = "07911 123456"
NAME = "Priya Shah"
SECRET = "test-installation-secret"
CLEAR = (CARD, "4111111111111111", IBAN, "GB82WEST", EMAIL, PHONE, NAME)


def user_text(name: str = NAME) -> str:
    return (
        f"Please pay with my card {CARD} for {name}. Refunds to {IBAN}."
        f" Email {EMAIL} or call {PHONE}."
    )


class Payment(BaseModel):
    card_number: Annotated[str, Redact("mask")]
    holder: Annotated[str, Redact("pseudonymise")]
    memo: str = Field(default="", json_schema_extra={"redact": "drop"})
    iban: str = ""


shop_log = structlog.get_logger("shop")


CHARGED: list[Payment] = []


async def charge(request: Payment, context: HandlerContext) -> Outcome:
    CHARGED.append(request)
    # A handler that logs what it was given: the log line must not show it in clear.
    shop_log.info("charging", card=request.card_number, request=request)
    try:
        raise RuntimeError(f"gateway declined {request.card_number}")
    except RuntimeError:
        shop_log.exception("gateway.failed")
    return Outcome(
        instruction=f"Confirm paying with card {request.card_number} for {request.holder}"
    )


PAY = Category(name="PAY", description="Paying", request=Payment, handler=charge)


def extraction(name: str) -> dict[str, Any]:
    return {
        "request": {
            "card_number": CARD,
            "holder": name,
            "memo": "birthday present for mum",
            "iban": IBAN,
        }
    }


async def _record(url: str, team: FakeTeam) -> None:
    team.route = lambda r: "PAY"
    # A policy that redacts everything it can: the models and stores are unaffected by it.
    policy = RedactionPolicy(style="pseudonymise", secret=SECRET)
    orch = Orchestrator([PAY], model=team.model(), store=url, redaction=policy)
    try:
        await orch.handle("conv-1", user_text(), user_id="u-1")
        # Another user with the same name: the same value, another pseudonym.
        team.extract = lambda r: extraction(NAME)
        await orch.handle("conv-2", user_text(), user_id="u-2")
    finally:
        await orch.aclose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def backend_url(request: pytest.FixtureRequest, db_url: str) -> str:
    """The database the views read: a SQLite file, or a fresh PostgreSQL database."""
    return db_url if request.param == "sqlite" else str(request.getfixturevalue("fresh_pg_url"))


@pytest.fixture
def recorded(backend_url: str, team: FakeTeam) -> Iterator[tuple[str, FakeTeam, LogCapture]]:
    team.extract = lambda r: extraction(NAME)
    capture = LogCapture()
    saved = structlog.get_config()
    # frontdesk's chain (with its redacting processor), captured instead of rendered.
    structlog.configure(processors=[*saved["processors"][:-1], capture])
    try:
        asyncio.run(_record(backend_url, team))
    finally:
        structlog.configure(**saved)
    yield backend_url, team, capture


def cli(*args: str, env: dict[str, str] | None = None) -> str:
    result = runner.invoke(
        app, list(args), env={"COLUMNS": "250", SECRET_ENV: SECRET, **(env or {})}
    )
    assert result.exit_code == 0, result.output
    return result.stdout  # The no-master-key warning goes to stderr.


def clear_in(text: str) -> list[str]:
    return [s for s in CLEAR if s in text]


def pseudonym(user: str) -> str:
    return Redactor(RedactionPolicy(secret=SECRET)).pseudonym(NAME, user_id=user)


# -- what models and stores get ----------------------------------------------------------


def test_the_models_still_receive_what_the_user_wrote(
    recorded: tuple[str, FakeTeam, LogCapture],
) -> None:
    _, team, _ = recorded
    [request_call, _] = team.of("request")
    assert request_call.messages[-1]["content"] == user_text()
    assert all(s in json.dumps(request_call.messages) for s in (CARD, IBAN, EMAIL, PHONE))
    assert CHARGED[-1].card_number == CARD and CHARGED[-1].holder == NAME  # the handler did
    # The ruled values reach the handler and nothing after it (issue 40): the response
    # expert's instruction and thread show them as their rules say.
    response = team.of("response")[0]
    instruction = response.messages[-1]["content"]
    assert "card **** **** **** 1111 for [pseudonym:" in instruction
    assert CARD not in json.dumps(response.messages) and NAME not in json.dumps(response.messages)


def test_the_thread_and_the_audit_log_store_what_the_user_wrote(
    db_url: str, team: FakeTeam
) -> None:
    team.extract = lambda r: extraction(NAME)

    async def main() -> None:
        team.route = lambda r: "PAY"
        orch = Orchestrator([PAY], model=team.model(), store=db_url)
        await orch.handle("conv-1", user_text(), user_id="u-1")
        transcript = await orch.transcript("conv-1", user_id="u-1")
        thread = await orch.user_thread("conv-1", user_id="u-1")
        assert orch.audit_log is not None
        rows = await orch.audit_log.events("conv-1")
        await orch.aclose()
        # `scrub_secrets` (the default): the ruled values left the stored message once the
        # turn extracted them; the detectors' finds (IBAN, email, phone) stay as written.
        assert CARD not in transcript[0].content and "**** **** **** 1111" in transcript[0].content
        assert NAME not in transcript[0].content and "birthday" not in transcript[0].content
        assert IBAN in transcript[0].content and EMAIL in transcript[0].content
        assert thread.messages[0].content == transcript[0].content
        stored = "".join(json.dumps(r.payload) for r in rows)  # Blobs expanded.
        assert stored.count(CARD) > 3  # the audit keeps what was written
        [request_row] = [r for r in rows if r.kind == "request"]
        assert request_row.payload["redact"] == {
            "card_number": "mask",
            "holder": "pseudonymise",
            "memo": "drop",
        }
        shown = redact_rows(rows, orch.redactor)
        assert [r.hash for r in shown] == [r.hash for r in rows]
        assert clear_in("".join(r.payload_json for r in shown)) == []
        assert clear_in("".join(json.dumps(r.payload) for r in shown)) == []

    asyncio.run(main())


# -- audit show -------------------------------------------------------------------------


def test_audit_show_is_redacted_by_default(recorded: tuple[str, FakeTeam, LogCapture]) -> None:
    db, _, _ = recorded
    out = cli("audit", "show", "conv-1", "--db", db)
    assert clear_in(out) == [] and "personal data redacted; --reveal shows it" in out
    assert "**** **** **** 1111" in out  # the card field, masked
    assert pseudonym("u-1") in out  # the holder field, pseudonymised
    assert "birthday present" not in out and '"memo"' not in out  # dropped
    assert "[IBAN]" in out and "[EMAIL]" in out and "[PHONE]" in out  # the detectors
    full = cli("audit", "show", "conv-1", "--full", "--db", db)
    assert clear_in(full) == [] and "messages sent" in full and "raw response" in full
    as_json = cli("audit", "show", "conv-1", "--json", "--db", db)
    assert clear_in(as_json) == [] and json.loads(as_json)["turns"]


def test_audit_show_reveal_shows_everything(recorded: tuple[str, FakeTeam, LogCapture]) -> None:
    db, _, _ = recorded
    out = cli("audit", "show", "conv-1", "--full", "--reveal", "--db", db)
    assert set(clear_in(out)) >= {CARD, IBAN, EMAIL, PHONE, NAME}
    assert "redacted" not in out
    assert "birthday present for mum" in out


def test_pseudonyms_are_stable_per_user_and_differ_across_users(
    recorded: tuple[str, FakeTeam, LogCapture],
) -> None:
    db, _, _ = recorded
    first = cli("audit", "show", "conv-1", "--db", db)
    assert cli("audit", "show", "conv-1", "--db", db) == first  # stable across runs
    second = cli("audit", "show", "conv-2", "--db", db)
    assert pseudonym("u-1") in first and pseudonym("u-2") in second
    assert pseudonym("u-1") != pseudonym("u-2") and pseudonym("u-1") not in second


# -- exports ----------------------------------------------------------------------------


def test_jsonl_export_is_redacted_by_default(
    recorded: tuple[str, FakeTeam, LogCapture], tmp_path: Path
) -> None:
    db, _, _ = recorded
    out = tmp_path / "audit.jsonl"
    cli("audit", "export", "conv-1", "-o", str(out), "--db", db)
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert lines and all(line["redacted"] is True for line in lines)
    assert clear_in(out.read_text(encoding="utf-8")) == []
    [request] = [line for line in lines if line["kind"] == "request"]
    assert request["payload"]["request"]["card_number"] == "**** **** **** 1111"

    clear = tmp_path / "clear.jsonl"
    cli("audit", "export", "conv-1", "-o", str(clear), "--reveal", "--db", db)
    revealed = [json.loads(line) for line in clear.read_text(encoding="utf-8").splitlines()]
    assert all("redacted" not in line for line in revealed)
    assert CARD in clear.read_text(encoding="utf-8")
    assert [r["hash"] for r in revealed] == [r["hash"] for r in lines]


def test_html_export_is_redacted_by_default(
    recorded: tuple[str, FakeTeam, LogCapture], tmp_path: Path
) -> None:
    db, _, _ = recorded
    out = tmp_path / "audit.html"
    cli("audit", "export", "--all", "--format", "html", "-o", str(out), "--db", db)
    page = out.read_text(encoding="utf-8")
    assert clear_in(page) == [] and "**** **** **** 1111" in page
    assert 'id="redacted"' in page  # the page says so
    cli("audit", "export", "--all", "--format", "html", "-o", str(out), "--reveal", "--db", db)
    page = out.read_text(encoding="utf-8")
    assert CARD in page and 'id="redacted"' not in page


def test_a_policy_file_configures_the_views(
    recorded: tuple[str, FakeTeam, LogCapture], tmp_path: Path
) -> None:
    db, _, _ = recorded
    policy = tmp_path / "policy.json"
    policy.write_text(
        json.dumps({"styles": {"iban": "mask"}, "fields": {"holder": "mask"}}), encoding="utf-8"
    )
    out = cli("audit", "show", "conv-1", "--redaction", str(policy), "--db", db)
    assert "**** **** **** **** **54 32" in out and "***** Shah" in out
    assert clear_in(out) == []
    from_env = cli(
        "audit", "show", "conv-1", "--db", db, env={"FRONTDESK_REDACTION_POLICY": str(policy)}
    )
    assert from_env == out
    policy.write_text(json.dumps({"style": "blur"}), encoding="utf-8")
    result = runner.invoke(app, ["audit", "show", "conv-1", "--redaction", str(policy), "--db", db])
    assert result.exit_code == 2 and "unknown replacement style 'blur'" in result.output


# -- logs -------------------------------------------------------------------------------


def test_logs_never_show_the_personal_data(recorded: tuple[str, FakeTeam, LogCapture]) -> None:
    _, _, capture = recorded
    charging = [e for e in capture.entries if e["event"] == "charging"]
    failed = [e for e in capture.entries if e["event"] == "gateway.failed"]
    assert len(charging) == 2 and len(failed) == 2
    assert charging[0]["card"] == "[CARD]"
    # A request model is logged as its fields, with its rules (no user id: one pseudonym).
    assert charging[0]["request"]["card_number"] == "**** **** **** 1111"
    assert charging[0]["request"]["holder"].startswith("[pseudonym:")
    assert "memo" not in charging[0]["request"]
    assert "gateway declined [CARD]" in failed[0]["exception"]
    assert clear_in(repr(capture.entries)) == []


def test_the_processor_is_in_structlogs_default_chain() -> None:
    import frontdesk  # noqa: F401 (installs it)

    processors = structlog.get_config()["processors"]
    assert any(isinstance(p, RedactingProcessor) for p in processors)
    out = io.StringIO()
    saved = structlog.get_config()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(out))
    try:
        structlog.get_logger("t").warning("refund", to=IBAN, text=user_text())
    finally:
        structlog.configure(**saved)
    assert clear_in(out.getvalue().replace(NAME, "")) == [] and "[IBAN]" in out.getvalue()


def test_a_processor_with_a_policy_of_its_own() -> None:
    processor = RedactingProcessor(Redactor(RedactionPolicy(styles={"card": "mask"})))
    event = processor(None, "info", {"event": "x", "card": CARD, "n": 4111111111111111})
    assert event == {"event": "x", "card": "**** **** **** 1111", "n": "************1111"}


def test_the_orchestrator_takes_a_policy(db_url: str, team: FakeTeam) -> None:
    policy = RedactionPolicy(detectors={"card"})
    orch = Orchestrator([PAY], model=team.model(), store=db_url, redaction=policy)
    assert orch.redactor.policy is policy
    assert orch.redactor.text(f"{CARD} {EMAIL}") == f"[CARD] {EMAIL}"
    mine = Redactor()
    assert Orchestrator([PAY], model=team.model(), store=db_url, redaction=mine).redactor is mine


# -- replay ------------------------------------------------------------------------------

OTHER_CARD = "5555 5555 5555 4444"


def other_card() -> Orchestrator:
    """The app with a request expert that now reads another card (for `--app`)."""
    team = FakeTeam(route=lambda r: "PAY")
    team.extract = lambda r: {"request": {**extraction(NAME)["request"], "card_number": OTHER_CARD}}
    return Orchestrator([PAY], model=team.model(), audit=False)


def test_audit_replay_prints_redacted_changes(
    recorded: tuple[str, FakeTeam, LogCapture],
) -> None:
    db, _, _ = recorded
    args = ["audit", "replay", "conv-1", "--app", f"{__name__}:other_card", "--db", db]
    result = runner.invoke(app, args, env={"COLUMNS": "250", SECRET_ENV: SECRET})
    assert result.exit_code == 1, result.output
    # The card field's recorded rule (mask) applies to the replayed value too.
    assert "request.card_number: **** **** **** 1111 -> **** **** **** 4444" in result.output
    assert clear_in(result.output) == [] and "5555" not in result.output
    revealed = runner.invoke(app, [*args, "--reveal"], env={"COLUMNS": "250"})
    assert revealed.exit_code == 1
    assert f"request.card_number: {CARD} -> {OTHER_CARD}" in revealed.output


# -- through the real SDK ---------------------------------------------------------------


def test_the_provider_is_sent_the_digits_and_a_schema_without_rules(
    wire: WireServer, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", wire.url)
    wire.script(
        ANTHROPIC_PATH,
        Reply(body=anthropic_tool("TriageDecision", {"category": "PAY", "reason": "paying"})),
        Reply(body=anthropic_tool("PaymentExtraction", extraction(NAME))),
        Reply(body=anthropic_text("Please confirm the payment.")),
    )

    async def main() -> None:
        policy = RedactionPolicy(style="mask")
        orch = Orchestrator(  # memory off: the wire server answers the turn's 3 calls only
            [PAY], model="anthropic:claude-test", store=db_url, redaction=policy, memory=False
        )
        await orch.handle("conv-1", user_text(), user_id="u-1")
        await orch.aclose()

    asyncio.run(main())
    bodies = [r.body for r in wire.requests_to(ANTHROPIC_PATH)]
    assert len(bodies) == 3
    request_body = json.dumps(bodies[1], ensure_ascii=False)
    assert all(s in request_body for s in (CARD, IBAN, EMAIL, PHONE, NAME))
    [tool] = bodies[1]["tools"]
    assert "redact" not in json.dumps(tool["input_schema"])  # the rules stay with frontdesk
    # The response call comes after the handler: the ruled values are shown as their rules say.
    response_body = json.dumps(bodies[2], ensure_ascii=False)
    assert "card **** **** **** 1111 for [pseudonym:" in response_body
    assert CARD not in response_body and NAME not in response_body
    out = cli("audit", "show", "conv-1", "--full", "--db", db_url)
    assert clear_in(out) == [] and "raw response" in out
