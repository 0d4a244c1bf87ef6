"""`frontdesk init PATH [--name NAME]`: a new bot project that runs at once, offline.

What a newcomer needs first is a project of their own that works before they change it:
a package with two example categories, a help page loaded into the bot's knowledge, a YAML
conversation test, the one-screen example as a file (`python example.py`) and a README
whose two commands work offline in any environment where frontdesk is installed.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path
from string import Template
from typing import Annotated

import typer

from frontdesk.errors import UserError

PYPROJECT = """\
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "$title: a customer-service bot on frontdesk."
requires-python = ">=3.11"
dependencies = ["frontdesk>=0.1"]

[project.optional-dependencies]
# `frontdesk serve --app $package.bot:build`: the HTTP service and its pages.
serve = ["frontdesk[serve]>=0.1"]

[tool.setuptools]
packages = ["$package"]

[tool.setuptools.package-data]
$package = ["*.md"]
"""

README = """\
# $title

A customer-service bot on frontdesk: two categories in `$package/bot.py` (where an order
is, opening hours), a help page (`$package/help.md`) loaded into its knowledge, and a
conversation test (`tests/conversations.yaml`).

What it needs: Python 3.11+ with frontdesk installed in the environment you run these in
(`pip install path/to/frontdesk`, or the activated venv of a frontdesk checkout). Both run
offline: the offline stand-in model, no API key, no network.

```bash
python example.py                                                    # one conversation
python -m frontdesk test tests/conversations.yaml --app $package.bot:build   # the test
```

(`make demo` and `make test` run the same two.)

Next:

- Talk to it: `python -m frontdesk chat --app $package.bot:build --model offline --debug`
  (with `ANTHROPIC_API_KEY` set, leave out `--model offline`, or name a model:
  `--model anthropic:claude-sonnet-4-5`).
- Add a category in `$package/bot.py`: a pydantic request model, an async handler that
  returns an `Outcome`, and a `Category` in `CATEGORIES`; then a conversation in
  `tests/conversations.yaml` for it.
- Serve it with its chat page and operator desks (`pip install 'frontdesk[serve]'`):
  `python -m frontdesk serve --app $package.bot:build --model offline --demo-tokens`.
"""

MAKEFILE = """\
# The README's two commands; PYTHON is an interpreter with frontdesk installed.
PYTHON ?= python3

.PHONY: demo test

demo:
\t$$(PYTHON) example.py

test:
\t$$(PYTHON) -m frontdesk test tests/conversations.yaml --app $package.bot:build
"""

INIT = """\
\"\"\"$title: a customer-service bot on frontdesk.\"\"\"

from $package.bot import CATEGORIES, build, load_help, profile

__all__ = ["CATEGORIES", "build", "load_help", "profile"]
"""

BOT = """\
\"\"\"$title's categories: each a request model (what to extract from the user), a handler
(plain Python that acts on it) and a `Category` tying them together.\"\"\"

from __future__ import annotations

from importlib import resources
from typing import Any, Literal

from frontdesk import Category, HandlerContext, Orchestrator, Outcome, Profile
from pydantic import BaseModel, Field

BUSINESS_NAME = "$title"
ORDERS = {"1001": "shipped", "1002": "being packed"}
\"\"\"Stands in for your order system.\"\"\"


class OrderStatusRequest(BaseModel):
    \"\"\"Where is an order.\"\"\"

    order_number: str = Field(pattern=r"^\\d{4,8}$$", description="The order number, digits only.")


async def order_status(request: OrderStatusRequest, context: HandlerContext) -> Outcome:
    \"\"\"Look the order up; the instruction tells the response expert what to say.\"\"\"
    status = ORDERS.get(request.order_number)
    if status is None:
        return Outcome(
            instruction=f"Tell the user we cannot find order {request.order_number} and ask"
            " them to check the number."
        )
    return Outcome(
        instruction=f"Tell the user that order {request.order_number} is {status}.",
        data={"order_number": request.order_number, "status": status},
    )


Day = Literal["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
HOURS = {"saturday": "10 am to 4 pm", "sunday": "closed"}


class OpeningHoursRequest(BaseModel):
    \"\"\"When the shop is open.\"\"\"

    day: Day = Field(description="The day of the week asked about.")


async def opening_hours(request: OpeningHoursRequest, context: HandlerContext) -> Outcome:
    \"\"\"The hours of one day.\"\"\"
    hours = HOURS.get(request.day, "9 am to 6 pm")
    return Outcome(
        instruction=f"Tell the user that on {request.day.title()} we are open {hours}."
        if hours != "closed"
        else f"Tell the user that we are closed on {request.day.title()}.",
        data={"day": request.day, "hours": hours},
    )


CATEGORIES = [
    Category(
        name="ORDER_STATUS",
        description="Where an order is, or when it will arrive.",
        request=OrderStatusRequest,
        handler=order_status,
        examples=["Where is my order 1001?", "Has order 1002 shipped?"],
    ),
    Category(
        name="OPENING_HOURS",
        description="When the shop is open: opening hours on a day of the week.",
        request=OpeningHoursRequest,
        handler=opening_hours,
        examples=["Are you open on Saturday?", "What are your opening hours on Monday?"],
    ),
]


def profile(model: Any = None) -> Profile:
    \"\"\"What $title is: its categories, its name, the models its experts use (`model`: a
    spec such as `offline` or `anthropic:claude-sonnet-4-5`; None: a provider key in the
    environment decides).\"\"\"
    return Profile(CATEGORIES, model=model, business_name=BUSINESS_NAME)


def build(
    *, model: Any = None, store: str = "sqlite:///$package.db", **kwargs: Any
) -> Orchestrator:
    \"\"\"The bot (`--app $package.bot:build`) on the store `store` (where it runs: `kwargs`
    are the runtime settings, e.g. `timeouts=`); `frontdesk test` and `frontdesk chat
    --model` pass their `model`.\"\"\"
    return Orchestrator(profile=profile(model), store=store, **kwargs)


async def load_help(orch: Orchestrator) -> int:
    \"\"\"Put help.md into the bot's knowledge (policy questions are answered from it, with
    the source cited); `frontdesk knowledge add $package/help.md --app $package.bot:build`
    does the same from the command line. Returns how many passages it holds.\"\"\"
    text = resources.files("$package").joinpath("help.md").read_text(encoding="utf-8")
    return await orch.knowledge.add("help.md", text)
"""

HELP = """\
# $title help

## Returns
Items can be returned within 30 days of delivery for a full refund. Write to us in the
chat with your order number and we send a return label.

## Delivery
Orders placed before 2 pm on a weekday are shipped the same day and arrive within three
working days.
"""

EXAMPLE = """\
\"\"\"The library in one screen: one conversation with $title, offline (no key, no network).

    python example.py

Each message goes through triage (the category), the request expert (a pydantic request),
your handler (plain Python) and the response expert; `reply` says what each decided.
\"\"\"

import asyncio
import tempfile
from pathlib import Path

from $package.bot import build, load_help

MESSAGES = [
    "Where is my order 1001?",
    "Are you open on Saturday?",
    "How long do I have to return something?",
]


async def main() -> None:
    store = Path(tempfile.mkdtemp(prefix="$package-")) / "example.db"
    # A real model instead: model="anthropic:claude-sonnet-4-5" with ANTHROPIC_API_KEY set.
    orch = build(model="offline", store=f"sqlite:///{store}")
    try:
        await load_help(orch)
        for number, text in enumerate(MESSAGES, 1):
            reply = await orch.handle(
                "example-1", text, user_id="u-1", client_message_id=f"m-{number}"
            )  # idempotent per client_message_id: a retry never runs the handler twice
            print(f"you> {text}")
            print(f"bot> {reply.text}")
            print(f"     category={reply.category} request={reply.request!r}")
            if reply.sources:
                print(f"     sources={sorted({p.source for p in reply.sources})}")
    finally:
        await orch.aclose()


if __name__ == "__main__":
    asyncio.run(main())
"""

CONVERSATIONS = """\
# Conversation tests: `python -m frontdesk test tests/conversations.yaml --app $package.bot:build`.
# Without --model the expected category and request ARE the experts' answers, so this is a
# deterministic test of the handlers; with --model SPEC it evaluates a real model.
conversations:
  - name: where is an order
    user_id: alice
    turns:
      - user: "Where is my order 1001?"
        category: ORDER_STATUS
        request: {order_number: "1001"}
        data: {status: shipped}
        reply_contains: ["shipped"]
  - name: opening hours
    user_id: bob
    turns:
      - user: "Are you open on Saturday?"
        category: OPENING_HOURS
        request: {day: saturday}
        reply_contains: ["10 am to 4 pm"]
      - user: "And on Sunday?"
        category: OPENING_HOURS
        request: {day: sunday}
        reply_contains: ["closed"]
"""

GITIGNORE = """\
*.db
*.db-*
__pycache__/
.venv/
"""


def package_name(path: Path) -> str:
    """The Python package name a project folder gets (`my-bot` -> `my_bot`).

    Raises:
        UserError: no letters to make a name from.
    """
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", path.name).strip("_").lower()
    if not name:
        raise UserError(f"cannot make a package name from {path.name!r}: name the folder")
    if name[0].isdigit() or keyword.iskeyword(name):
        name = f"bot_{name}"
    return name


def files(package: str, title: str) -> dict[str, str]:
    """Every file of a new project, by its path inside the project folder."""
    values = {
        "package": package,
        "dist": package.replace("_", "-"),
        "title": title.replace('"', "'"),
    }
    templates = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        "Makefile": MAKEFILE,
        ".gitignore": GITIGNORE,
        "example.py": EXAMPLE,
        f"{package}/__init__.py": INIT,
        f"{package}/bot.py": BOT,
        f"{package}/help.md": HELP,
        "tests/conversations.yaml": CONVERSATIONS,
    }
    return {path: Template(text).substitute(values) for path, text in templates.items()}


def init(
    path: Annotated[Path, typer.Argument(help="The new project's folder (new or empty).")],
    name: Annotated[
        str | None,
        typer.Option("--name", help="The business's name, as the bot says it (default: PATH)."),
    ] = None,
) -> None:
    """Write a new bot project: two categories, a help page, a conversation test, the
    one-screen example and a README whose two commands run offline at once."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UserError(f"{path} exists and is not an empty folder: give a new path")
    package = package_name(path.resolve())
    title = name or path.resolve().name
    for relative, text in files(package, title).items():
        target = path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    typer.echo(f"Created {path}/ ({package}: two categories, a help page, a test). Then:")
    typer.echo(f"  cd {path}")
    typer.echo("  python example.py")
    typer.echo(f"  python -m frontdesk test tests/conversations.yaml --app {package}.bot:build")
