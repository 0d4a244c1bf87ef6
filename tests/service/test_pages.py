"""The customer chat page and the operator console, driven in real headless Chromium.

Screenshots go to a temporary folder (or to $FRONTDESK_SCREENSHOTS when set, to look at).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from frontdesk.service import TokenVerifier, create_app
from tests.service import _shop
from tests.service._server import serve_thread
from tests.service.conftest import SECRET, token

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
    expect(page.locator(".msg")).to_have_count(4)
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
    waiting.click()
    expect(console.locator("#log .msg.user").last).to_contain_text("talk to a person")
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
    page.click("#forget-all")
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
