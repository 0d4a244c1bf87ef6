"""The operator desk in real headless Chromium, against `frontdesk serve --workers 2` on
PostgreSQL: a customer and operators in separate browser contexts at once, each seeing the
other live; axe-core (tests/service/axe, `make test` installs it) on every state visited;
the keyboard alone; a 390 px wide phone; a failed payment retried with the same key.

Screenshots and the axe-core counts go to a temporary folder (or $FRONTDESK_SCREENSHOTS).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from frontdesk.threads.resolution import ResolutionStore
from frontdesk.threads.store import ConversationStore
from tests._pg import fresh_database
from tests.service._server import serve_process
from tests.service._shop import FLAKY_ENV, RUNS_ENV
from tests.service.conftest import SECRET, auth, token

pytestmark = [
    pytest.mark.browser,
    pytest.mark.postgres,
    pytest.mark.processes,
    pytest.mark.timeout(240),
]

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
AXE = Path(__file__).parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
OPERATOR = ("operator",)
STREAM_SECONDS = 3  # streams end this often: every page reconnects with Last-Event-ID


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("desk")


DATABASE: dict[str, str] = {}
"""The served database's URL (`server`), for reading what the pages stored."""


@pytest.fixture(scope="module")
def server(files: Path) -> Iterator[str]:
    env = {
        "FRONTDESK_JWT_SECRET": SECRET,
        RUNS_ENV: str(files / "runs.log"),
        FLAKY_ENV: str(files / "flaky"),
        "FRONTDESK_RATE_LIMIT": "off",
        "FRONTDESK_EVENT_STREAM_SECONDS": str(STREAM_SECONDS),
    }
    # A database of its own: the served app holds a master key (its audit is encrypted),
    # and the session's shared database is read by tests that run without one.
    with fresh_database() as db:
        DATABASE["url"] = db
        args = ["--workers", "2", "--db", db, "--app", "tests.service._shop:build"]
        with serve_process(args, env, workers=2) as (url, _process):
            yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert AXE.exists(), "run `make test` (it installs axe-core: npm ci in tests/service/axe)"
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def shots() -> Path:
    folder = Path(os.environ.get("FRONTDESK_SCREENSHOTS") or "/tmp/frontdesk-desk-shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


AXE_COUNTS: dict[str, dict[str, int]] = {}


def axe(page: Page, state: str, shots: Path) -> None:
    """No serious or critical axe-core violation in this state of the page."""
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        page.evaluate(AXE.read_text(encoding="utf-8"))  # by CDP: the page's CSP still holds
    result: dict[str, Any] = page.evaluate("async () => await axe.run(document)")
    counts: dict[str, int] = {}
    for v in result["violations"]:
        impact = v["impact"] or "none"
        counts[impact] = counts.get(impact, 0) + len(v["nodes"])
    AXE_COUNTS[state] = counts
    (shots / "axe-counts.json").write_text(json.dumps(AXE_COUNTS, indent=2, sort_keys=True))
    bad = [
        (v["id"], v["impact"], [n["target"] for n in v["nodes"]])
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert bad == [], f"{state}: {bad}"


def no_sideways_scroll(page: Page) -> None:
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"] if page.viewport_size else True, width


def customer(
    browser: Browser, url: str, user: str, width: int = 1100
) -> tuple[BrowserContext, Page]:
    context = browser.new_context(viewport={"width": width, "height": 760})
    page = context.new_page()
    page.goto(f"{url}/#token={token(user)}")
    return context, page


def console(
    browser: Browser, url: str, operator: str, width: int = 1280
) -> tuple[BrowserContext, Page]:
    context = browser.new_context(viewport={"width": width, "height": 760})
    page = context.new_page()
    page.goto(f"{url}/operator#token={token(operator, roles=OPERATOR)}")
    return context, page


def say(page: Page, text: str) -> None:
    page.fill("#text", text)
    page.click("#go")


def conversation_of(page: Page) -> str:
    cid = page.evaluate("() => sessionStorage.getItem('fd-conversation')")
    assert isinstance(cid, str) and cid
    return cid


def test_the_whole_hand_off_live_on_both_sides(browser: Browser, server: str, shots: Path) -> None:
    user = f"cust{time.time_ns() % 10**8}"
    c_ctx, chat = customer(browser, server, user)
    o_ctx, desk = console(browser, server, "sam")
    b_ctx, other = console(browser, server, "bob")
    reconnects: list[str | None] = []
    chat.on(
        "request",
        lambda r: reconnects.append(r.headers.get("last-event-id")) if "/events" in r.url else None,
    )
    try:
        expect(desk.locator("#queue")).to_be_visible()
        axe(desk, "console, nothing open", shots)
        say(chat, "hello")
        expect(chat.locator(".msg.assistant").last).to_contain_text("You said: hello.")
        axe(chat, "chat, answered by the bot", shots)
        cid = conversation_of(chat)

        say(chat, "can I talk to a person please")
        banner = chat.locator("#banner")
        expect(banner).to_contain_text("number 1 in the queue")
        expect(banner).not_to_contain_text("taken over")
        axe(chat, "chat, waiting in the queue", shots)

        item = desk.locator("#queue li", has_text=cid)
        expect(item).to_contain_text("not claimed")  # live: no reload
        axe(desk, "console, one waiting", shots)
        # The keyboard alone: Tab to the queue item, Enter opens it read-only; Enter again
        # (the focus is on "Take this conversation") takes it.
        desk.locator("body").focus()
        for _ in range(30):
            desk.keyboard.press("Tab")
            if desk.evaluate("() => document.activeElement.dataset.conversation || ''") == cid:
                break
        else:
            pytest.fail("the queue item is not reachable by Tab")
        desk.keyboard.press("Enter")
        expect(desk.locator("#claim")).to_contain_text("Nobody has taken this conversation yet")
        expect(desk.locator("#reply")).to_be_disabled()
        expect(item).to_contain_text("not claimed")  # looking claims nothing
        axe(desk, "console, conversation open read-only", shots)
        expect(desk.locator("#take")).to_be_focused()
        desk.keyboard.press("Enter")
        expect(desk.locator("#claim")).to_contain_text("You have this conversation")
        expect(item).to_contain_text("yours")
        expect(other.locator("#queue li", has_text=cid)).to_contain_text("claimed by sam")
        expect(banner).to_contain_text("taken over")
        expect(desk.locator("#turns")).to_contain_text("HUMAN")  # the context beside it
        axe(desk, "console, conversation open", shots)

        # A second operator is refused until they take it over.
        refused = httpx.post(
            f"{server}/v1/conversations/{cid}/operator-messages",
            json={"text": "Bob here"},
            headers=auth("bob", roles=OPERATOR),
            timeout=30.0,
        )
        assert refused.status_code == 409

        desk.fill("#reply", "Hi, I'm Sam. Your order ships today.")
        desk.keyboard.press("Enter")
        expect(desk.locator("#log .msg.operator")).to_contain_text("Sam. Your order", timeout=500)
        answer = chat.locator(".msg.operator")
        expect(answer).to_contain_text("Your order ships today.", timeout=2000)  # live, < 2 s
        expect(answer.locator(".who")).to_have_text("Agent")
        assert "operator:" not in chat.locator("body").inner_text()
        axe(chat, "chat, answered by a person", shots)
        chat.screenshot(path=str(shots / "chat-desktop.png"), full_page=True)
        desk.screenshot(path=str(shots / "console-desktop.png"), full_page=True)

        say(chat, "thanks, one more thing")
        expect(desk.locator("#log .msg.user").last).to_contain_text("one more thing")
        time.sleep(STREAM_SECONDS + 1)  # every stream has ended once and reconnected
        desk.fill("#reply", "Go ahead.")
        desk.click("#send")
        expect(chat.locator(".msg.operator", has_text="Go ahead.")).to_have_count(1)
        assert any(r for r in reconnects), f"no reconnect sent Last-Event-ID: {reconnects}"
        ids = chat.evaluate(
            "() => [...document.querySelectorAll('#log .msg')].map(d => d.dataset.id)"
        )
        assert len(ids) == len(set(ids)), ids  # nothing drawn twice after the reconnects

        # Bob takes it over from Sam: he is asked first; Sam sees it at once (no Send
        # refused first), his reply box disabled, saying why.
        other.locator("#queue li", has_text=cid).locator("button").click()
        expect(other.locator("#reply")).to_be_disabled()
        expect(other.locator("#claim")).to_contain_text("sam has this conversation")
        other.get_by_role("button", name="Take this conversation from sam").click()
        expect(other.locator("#confirm-take")).to_contain_text("They can no longer reply")
        axe(other, "console, confirm taking it from another", shots)
        other.get_by_role("button", name="Yes, take it from sam").click()
        expect(other.locator("#claim")).to_contain_text("You have this conversation")
        expect(desk.locator("#claim")).to_contain_text(
            "bob took this conversation over from you: you can no longer reply"
        )
        expect(desk.locator("#reply")).to_be_disabled()
        expect(desk.locator("#send")).to_be_disabled()
        axe(desk, "console, conversation lost to another", shots)
        desk.screenshot(path=str(shots / "console-lost.png"), full_page=True)

        other.click("#hand-back")
        expect(other.locator("#status")).to_contain_text("Handed back")
        expect(other.locator("#queue li", has_text=cid)).to_have_count(0)
        expect(banner).to_have_text("You're back with the assistant.")
        axe(chat, "chat, back with the assistant", shots)
        say(chat, "and a refund?")
        expect(chat.locator(".msg.assistant").last).to_contain_text("You said: and a refund?.")
        expect(banner).to_be_hidden()
        axe(chat, "chat, handed back", shots)
    finally:
        for ctx in (c_ctx, o_ctx, b_ctx):
            ctx.close()


def test_a_phone_the_keyboard_and_a_message_over_the_limit(
    browser: Browser, server: str, shots: Path
) -> None:
    user = f"phone{time.time_ns() % 10**8}"
    c_ctx, chat = customer(browser, server, user, width=390)
    o_ctx, desk = console(browser, server, "sam", width=390)
    try:
        say(chat, "remember that I am allergic to peanuts")
        expect(chat.locator(".msg.assistant").last).to_contain_text("You said: remember")
        delete = chat.get_by_role("button", name="Delete 'I am allergic to peanuts'")
        expect(delete).to_be_visible(timeout=10000)
        too_long = "x" * 20000
        chat.fill("#text", too_long)
        chat.click("#go")
        expect(chat.locator("#status")).to_contain_text("too long")
        status = chat.locator("#status").inner_text()
        assert "Orchestrator" not in status and "422" not in status and "max_message" not in status
        assert chat.input_value("#text") == too_long  # still in the box
        no_sideways_scroll(chat)
        axe(chat, "chat at 390 px, refused message", shots)
        chat.screenshot(path=str(shots / "chat-390.png"), full_page=True)

        say(chat, "a person please")
        expect(chat.locator("#banner")).to_contain_text("queue")
        cid = conversation_of(chat)
        expect(desk.locator("#queue li", has_text=cid)).to_be_visible()
        desk.locator("#queue li", has_text=cid).locator("button").focus()
        desk.keyboard.press("Enter")  # open (read-only), then take it
        expect(desk.locator("#take")).to_be_focused()
        desk.keyboard.press("Enter")
        expect(desk.locator("#claim")).to_contain_text("You have this conversation")
        no_sideways_scroll(desk)
        axe(desk, "console at 390 px, conversation open", shots)
        desk.screenshot(path=str(shots / "console-390.png"), full_page=True)
        # Keyboard alone on the chat page: Tab reaches the box and Enter sends (past each
        # answer's two rating buttons).
        chat.locator("body").focus()
        for _ in range(30):
            chat.keyboard.press("Tab")
            if chat.evaluate("() => document.activeElement.id") == "text":
                break
        chat.keyboard.type("typed with the keyboard")
        chat.keyboard.press("Enter")
        expect(desk.locator("#log .msg.user").last).to_contain_text("typed with the keyboard")
    finally:
        c_ctx.close()
        o_ctx.close()


def test_a_failed_payment_is_retried_with_its_key_and_moves_money_once(
    browser: Browser, server: str, files: Path, shots: Path
) -> None:
    user = f"payer{time.time_ns() % 10**8}"
    flaky, runs = files / "flaky", files / "runs.log"
    flaky.write_text("fail the response expert")
    c_ctx, chat = customer(browser, server, user)
    try:
        text = "count flaky transfer of 100"
        say(chat, text)
        retry = chat.get_by_role("button", name=f"Retry sending '{text}'")
        expect(retry).to_be_visible(timeout=30000)  # handler ran, outcome stored, then failed
        cid = conversation_of(chat)
        ran = [line for line in runs.read_text().splitlines() if line.startswith(cid)]
        assert len(ran) == 1
        axe(chat, "chat, a failed message", shots)
        flaky.unlink()  # the provider is back
        chat.fill("#text", text)  # the same words again: offered as the retry
        expect(chat.locator("#hint")).to_contain_text("retries it once")
        chat.click("#go")
        expect(chat.locator(".msg.assistant").last).to_contain_text(f"You said: {text}.")
        expect(retry).to_have_count(0)
        ran = [line for line in runs.read_text().splitlines() if line.startswith(cid)]
        assert len(ran) == 1, ran  # the money moved once
        assert chat.locator(".msg.user", has_text=text).count() == 1
    finally:
        if flaky.exists():
            flaky.unlink()
        c_ctx.close()


def ratings_of(cid: str) -> list[tuple[int, str | None]]:
    """The ratings stored for a conversation's answers, read from the served database."""

    async def read() -> list[tuple[int, str | None]]:
        store = await ConversationStore.open(DATABASE["url"])
        try:
            return [
                (r.rating, r.comment)
                for r in await ResolutionStore(store.engine).of_conversation(cid)
            ]
        finally:
            await store.aclose()

    with ThreadPoolExecutor(1) as pool:  # Playwright's own loop runs in this thread.
        return pool.submit(asyncio.run, read()).result()


def test_that_is_all_resolves_asks_one_to_five_and_the_desk_hands_back_resolved(
    browser: Browser, server: str, shots: Path
) -> None:
    user = f"done{time.time_ns() % 10**8}"
    c_ctx, chat = customer(browser, server, user)
    p_ctx, person = customer(browser, server, user + "p")
    o_ctx, desk = console(browser, server, "sam")
    survey = chat.locator("#survey")
    try:
        say(chat, "hello")
        expect(chat.locator(".msg.assistant").last).to_contain_text("You said: hello.")
        expect(survey).to_be_hidden()  # An open conversation is not asked about.
        say(chat, "that's all, thanks")
        last = chat.locator(".msg.assistant").last
        expect(last).to_contain_text("You said: that's all, thanks. Goodbye!")
        expect(survey).to_be_visible()  # The response expert judged it closed.
        assert "[closes]" not in chat.locator("#log").inner_text().lower()  # streamed, too
        cid = conversation_of(chat)
        state = httpx.get(f"{server}/v1/conversations/{cid}", headers=auth(user), timeout=30.0)
        assert (state.json()["resolution"], state.json()["resolved_by"]) == (
            "resolved",
            "customer",
        )
        axe(chat, "chat, resolved: the 1-5 question", shots)
        survey.get_by_role("button", name="4").click()
        expect(chat.locator("#survey-note")).to_have_text(
            "Thank you: you rated this conversation 4 out of 5."
        )
        survey.get_by_role("button", name="2").click()  # Changed their mind: replaced.
        expect(chat.locator("#survey-note")).to_contain_text("2 out of 5")
        expect(survey.get_by_role("button", name="2")).to_have_attribute("aria-pressed", "true")
        expect(survey.get_by_role("button", name="4")).to_have_attribute("aria-pressed", "false")
        axe(chat, "chat, resolved and rated", shots)
        chat.screenshot(path=str(shots / "chat-resolved-rated.png"), full_page=True)
        assert ratings_of(cid) == [(2, None)]  # One rating, the last one.
        mid = last.get_attribute("data-id")
        refused = httpx.post(  # Someone else's conversation: as if it did not exist.
            f"{server}/v1/conversations/{cid}/messages/{mid}/feedback",
            json={"rating": 5},
            headers=auth(user + "p"),
            timeout=30.0,
        )
        assert refused.status_code == 404
        assert ratings_of(cid) == [(2, None)]

        # The desk: the resolution of the conversation it opens, and a resolved hand-back.
        say(person, "a person please")
        handed = conversation_of(person)
        desk.locator("#queue li", has_text=handed).locator("button").click()
        expect(desk.locator("#resolution")).to_have_text("Resolution: handed to a person.")
        axe(desk, "console, a handed-off conversation's resolution", shots)
        desk.get_by_role("button", name="Take this conversation").click()
        expect(desk.locator("#claim")).to_contain_text("You have this conversation")
        desk.fill("#reply", "Done: your order is on its way.")
        desk.click("#send")
        expect(person.locator(".msg.operator")).to_contain_text("on its way")
        desk.get_by_role("button", name="Hand back as resolved").click()
        expect(desk.locator("#status")).to_have_text("Handed back to the bot, marked resolved.")
        expect(desk.locator("#resolution")).to_have_text("Resolution: resolved by an agent.")
        axe(desk, "console, handed back as resolved", shots)
        desk.screenshot(path=str(shots / "console-resolved.png"), full_page=True)
        expect(person.locator("#survey")).to_be_visible()  # Asked once an agent resolved it.
        axe(person, "chat, resolved by an agent: the 1-5 question", shots)
        person.locator("#survey").get_by_role("button", name="5").click()
        expect(person.locator("#survey-note")).to_contain_text("5 out of 5")
        assert ratings_of(handed) == [(5, None)]
    finally:
        for ctx in (c_ctx, p_ctx, o_ctx):
            ctx.close()
