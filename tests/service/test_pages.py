"""The customer chat page and the operator console, driven in real headless Chromium.

Screenshots go to a temporary folder (or to $FRONTDESK_SCREENSHOTS when set, to look at).
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

from frontdesk.service import TokenVerifier, create_app
from frontdesk.service._events import StreamTiming
from tests.service import _shop
from tests.service._server import serve_thread
from tests.service.conftest import SECRET, token
from tests.service.test_desk_pages import axe

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("FRONTDESK_SCREENSHOTS") or tmp_path / "shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def base_url(tmp_path: Path) -> Iterator[str]:
    app = create_app(
        _shop.build(f"sqlite:///{tmp_path / 'pages.db'}"),
        verifier=TokenVerifier(secret=SECRET),
        owns_orchestrator=True,
        allow_missing_idempotency_key=True,
        allow_client_conversation_ids=True,
    )
    with serve_thread(app) as url:
        yield url


def chat(browser: Browser, base_url: str, user: str, conversation: str) -> Page:
    page = browser.new_page(viewport={"width": 1100, "height": 700})
    page.goto(f"{base_url}/#token={token(user)}&conversation={conversation}")
    return page


def say(page: Page, text: str) -> None:
    page.fill("#text", text)
    page.click("#go")


def test_the_chat_page_streams_a_reply_and_escapes_it(
    browser: Browser, base_url: str, shots: Path
) -> None:
    page = chat(browser, base_url, "alice", "page-1")
    expect(page.locator("#who")).to_contain_text("alice")
    say(page, "hello there")
    expect(page.locator(".msg.assistant").last).to_contain_text("You said: hello there.")
    say(page, "<img src=x onerror=alert(1)>")
    expect(page.locator(".msg.assistant").last).to_contain_text("You said: <img src=x")
    assert page.locator("#log img").count() == 0  # shown as text, never as markup
    page.screenshot(path=str(shots / "chat.png"))
    # A reload shows the same conversation from the transcript.
    page.reload()
    expect(page.locator("#log .msg:not(#greeting)")).to_have_count(4)
    page.close()


def test_the_chat_page_offers_yes_and_no_for_a_request_to_confirm(
    browser: Browser, base_url: str, shots: Path
) -> None:
    page = chat(browser, base_url, "alice", "confirm-1")
    say(page, "send 5 to bob")
    asked = page.locator(".msg.assistant").last
    expect(asked).to_contain_text("Send £5 to Bob?")
    expect(asked.locator(".confirm button")).to_have_count(2)
    page.screenshot(path=str(shots / "chat-confirm.png"))
    asked.locator(".confirm button", has_text="Yes").click()
    expect(page.locator(".msg.assistant").last).to_contain_text("Sent £5 to Bob.")
    expect(page.locator(".confirm")).to_have_count(0)  # Answered: no second yes to click.
    expect(page.locator(".msg.user .text").last).to_have_text("Yes")
    page.close()


def test_the_chat_page_lists_what_the_reply_cites(browser: Browser, tmp_path: Path) -> None:
    from frontdesk import Orchestrator
    from tests.orchestrator.test_citations import FEES, POLICY, Q, cites_transfers, team

    store = f"sqlite:///{tmp_path / 'cites.db'}"

    async def add() -> None:
        async with Orchestrator([POLICY], model=team(cites_transfers), store=store) as orch:
            await orch.knowledge.add("https://help.example.com/fees", FEES)

    with ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread.
        pool.submit(asyncio.run, add()).result()
    app = create_app(
        Orchestrator([POLICY], model=team(cites_transfers), store=store),
        verifier=TokenVerifier(secret=SECRET),
        owns_orchestrator=True,
        allow_missing_idempotency_key=True,
        allow_client_conversation_ids=True,
    )
    with serve_thread(app) as url:
        page = chat(browser, url, "alice", "cite-1")
        say(page, Q)
        answer = page.locator(".msg.assistant").last
        expect(answer.locator(".text")).to_have_text(
            "It costs a flat 3 pounds plus a margin. Anything else?"
        )
        link = answer.locator(".cites a")
        expect(link).to_have_count(1)  # The passage cited; [9] and [42] were dropped.
        expect(link).to_have_text("https://help.example.com/fees - International transfers")
        assert link.get_attribute("href") == "https://help.example.com/fees"
        say(page, "hello")  # Cites nothing: shows nothing.
        expect(page.locator(".msg.assistant:not(#greeting)")).to_have_count(2)
        expect(page.locator(".msg.assistant").last.locator(".cites")).to_have_count(0)
        page.close()


def test_a_person_takes_over_answers_and_hands_back(
    browser: Browser, base_url: str, shots: Path
) -> None:
    customer = chat(browser, base_url, "alice", "round-trip")
    say(customer, "hello")
    expect(customer.locator(".msg.assistant").last).to_contain_text("You said: hello.")
    say(customer, "can I talk to a person please?")
    expect(customer.locator("#banner")).to_be_visible()

    console = browser.new_page(viewport={"width": 1100, "height": 700})
    console.goto(f"{base_url}/operator#token={token('sam', roles=('operator',))}")
    expect(console.locator("#who")).to_contain_text("sam")
    waiting = console.locator("#queue li", has_text="round-trip")
    expect(waiting).to_contain_text("alice")
    waiting.click()  # opens it read-only: nothing is claimed by looking
    expect(console.locator("#log .msg.user").last).to_contain_text("talk to a person")
    expect(console.locator("#reply")).to_be_disabled()
    console.get_by_role("button", name="Take this conversation").click()
    expect(console.locator("#claim")).to_contain_text("You have this conversation")
    console.fill("#reply", "Hi Alice, Sam here. Your order ships today.")
    console.click("#send")
    expect(console.locator("#log .msg.operator")).to_contain_text("Sam here")
    console.screenshot(path=str(shots / "operator.png"))

    answer = customer.locator(".msg.operator")
    expect(answer).to_contain_text("Hi Alice, Sam here. Your order ships today.")
    expect(answer.locator(".who")).to_have_text("Agent")
    customer.screenshot(path=str(shots / "chat-handed-off.png"))

    console.click("#hand-back")
    expect(console.locator("#status")).to_contain_text("Handed back")
    expect(console.locator("#queue li", has_text="round-trip")).to_have_count(0)
    expect(customer.locator("#banner")).to_have_text("You're back with the assistant.")

    say(customer, "thanks, and what about a refund?")
    expect(customer.locator(".msg.assistant").last).to_contain_text(
        "You said: thanks, and what about a refund?."
    )
    expect(customer.locator("#banner")).to_be_hidden()
    customer.screenshot(path=str(shots / "chat-handed-back.png"))
    console.close()
    customer.close()


def test_the_user_sees_and_deletes_what_is_remembered(
    browser: Browser, base_url: str, shots: Path
) -> None:
    page = chat(browser, base_url, "dora", "memories")
    expect(page.locator("#memories")).to_contain_text("Nothing remembered.")
    # Past conversations are not facts: a list of their own.
    expect(page.locator("#past-conversations")).to_contain_text("No past conversation kept.")
    say(page, "remember that I am allergic to peanuts")
    expect(page.locator(".msg.assistant").last).to_contain_text("You said: remember that")
    say(page, "remember that I live in Leeds")
    facts = page.locator("#memories li")
    expect(facts).to_have_count(2)
    expect(facts.first).to_contain_text("I live in Leeds")  # the newest first
    page.screenshot(path=str(shots / "chat-memories.png"))
    facts.filter(has_text="I live in Leeds").get_by_role("button", name="Delete").click()
    expect(facts).to_have_count(1)
    expect(facts.first).to_contain_text("I am allergic to peanuts")
    page.click("#forget-all")  # asks first; Cancel keeps everything
    expect(page.locator("#confirm-forget")).to_contain_text("cannot be undone")
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("#confirm-forget")).to_be_hidden()
    expect(facts).to_have_count(1)
    page.click("#forget-all")
    page.get_by_role("button", name="Yes, delete everything").click()
    expect(page.locator("#memories")).to_contain_text("Nothing remembered.")
    page.close()


def test_the_customer_rates_an_answer_with_a_comment(
    browser: Browser, base_url: str, shots: Path
) -> None:
    page = chat(browser, base_url, "erin", "rated")
    say(page, "hello there")
    answer = page.locator(".msg.assistant").last
    expect(answer).to_contain_text("You said: hello there.")
    answer.get_by_role("button", name="Not helpful").click()
    expect(answer.locator(".rated")).to_have_text("Thanks for telling us.")
    answer.get_by_role("button", name="Helpful", exact=True).click()  # Changed mind.
    expect(answer.get_by_role("button", name="Helpful", exact=True)).to_have_attribute(
        "aria-pressed", "true"
    )
    answer.get_by_label("Anything to add? (optional)").fill("Quick and clear")
    answer.get_by_role("button", name="Send comment").click()
    expect(answer.locator(".rated")).to_have_text("Thanks, your comment is saved.")
    page.screenshot(path=str(shots / "chat-rated.png"))
    request = urllib.request.Request(
        f"{base_url}/v1/conversations/rated", headers={"Authorization": f"Bearer {token('erin')}"}
    )
    with urllib.request.urlopen(request) as response:
        state = json.loads(response.read())
    assert (state["resolution"], state["resolved_by"]) == ("resolved", "customer")
    page.close()


def test_the_chat_page_greets_starts_over_clears_stale_warnings_and_reconnects(
    browser: Browser, tmp_path: Path, shots: Path
) -> None:
    """A first visit: the app's greeting, a conversation of its own. An answer whose request
    failed in the page but was answered all the same arrives by the live stream, and the
    warning goes. The live connection down: "Reconnecting…", then it catches up."""
    app = create_app(
        _shop.build(f"sqlite:///{tmp_path / 'greet.db'}"),
        verifier=TokenVerifier(secret=SECRET),
        owns_orchestrator=True,
        event_timing=StreamTiming(max_age=1.0),  # streams end each second and reconnect
        greeting="Hello from the test shop <3",
    )
    with serve_thread(app) as url:
        page = browser.new_page(viewport={"width": 1100, "height": 700})
        page.goto(f"{url}/#token={token('erin')}")
        expect(page.locator("#greeting")).to_contain_text("Hello from the test shop <3")
        axe(page, "chat, first visit", shots)
        first = conversation_of(page)

        def lost(route: Route) -> None:  # the server answers; the page never hears it
            route.fetch()
            route.abort()

        page.route("**/messages", lost)
        say(page, "hello")
        expect(page.locator(".msg.assistant").last).to_contain_text("You said: hello.")
        expect(page.locator("#status")).to_have_text("")
        expect(page.locator(".retry")).to_have_count(0)
        page.unroute("**/messages")

        page.route("**/events", lambda route: route.abort())  # the live connection down
        expect(page.locator("#connection")).to_have_text("Reconnecting\u2026")
        axe(page, "chat, reconnecting", shots)
        handed = httpx.post(
            f"{url}/v1/conversations/{first}/handoff",
            headers={"Authorization": f"Bearer {token('sam', roles=('operator',))}"},
            timeout=30,
        )
        assert handed.status_code == 200, handed.text
        page.unroute("**/events")
        expect(page.locator("#connection")).to_be_hidden()
        expect(page.locator("#banner")).to_contain_text("Waiting for a person")  # caught up

        page.get_by_role("button", name="New conversation").click()
        expect(page.locator("#log .msg:not(#greeting)")).to_have_count(0)
        expect(page.locator("#banner")).to_be_hidden()
        expect(page.locator("#greeting")).to_be_visible()
        # The page asks the service for the new conversation after the click: wait for it.
        page.wait_for_function("() => sessionStorage.getItem('fd-conversation')")
        assert conversation_of(page) != first
        say(page, "a fresh start")
        expect(page.locator(".msg.assistant").last).to_contain_text("You said: a fresh start.")
        page.click("#forget-all")
        axe(page, "chat, confirm deleting memories", shots)
        page.close()


def conversation_of(page: Page) -> str:
    cid = page.evaluate("() => sessionStorage.getItem('fd-conversation')")
    assert isinstance(cid, str) and cid
    return cid
