"""Conversation files that say what is wrong before running, compare values as the request
model reads them, check the documents a reply drew on, and apps refused at build."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel
from structlog.testing import capture_logs

from frontdesk.devkit.conversation_tests import load_file, run_files
from frontdesk.errors import ConfigError, InvalidConversationFile
from frontdesk.experts import Category, Outcome
from frontdesk.orchestrator import Orchestrator
from tests.orchestrator import _bank

pytestmark = pytest.mark.anyio


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "conv.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


async def test_a_misspelt_need_more_info_field_is_refused_naming_it(tmp_path: Path) -> None:
    text = """
    conversations:
      - name: typo
        turns:
          - user: "freeze my card"
            category: CARD_FREEZE
            need_more_info: [last_fuor]
    """
    with pytest.raises(
        InvalidConversationFile, match="'last_fuor', which FreezeCardRequest does not"
    ):
        await run_files([load_file(_file(tmp_path, text))], _bank.build, workdir=tmp_path)


async def test_a_number_for_a_text_field_is_compared_as_the_model_reads_it(tmp_path: Path) -> None:
    text = """
    conversations:
      - name: digits as a number
        user_id: alice
        turns:
          - user: "freeze 4242"
            category: CARD_FREEZE
            request: {last_four: 4242}
            reply_contains: ["frozen"]
    """
    report = await run_files([load_file(_file(tmp_path, text))], _bank.build, workdir=tmp_path)
    assert report.passed, report.text()


async def test_knowledge_sources_and_citations(tmp_path: Path) -> None:
    (tmp_path / "fees.md").write_text(
        "# Card fees\n\nA replacement card costs 5 pounds.\n", encoding="utf-8"
    )
    text = """
    knowledge: [fees.md]
    conversations:
      - name: a fee question
        turns:
          - user: "How much is a replacement card?"
            sources: [fees.md]
            citations: [fees.md]
            reply_contains: ["5 pounds"]
    """
    files = [load_file(_file(tmp_path, text))]
    report = await run_files(files, _bank.build, workdir=tmp_path, model="offline")
    assert report.passed, report.text()
    text = text.replace("citations: [fees.md]", "citations: [rates.md]")
    wrong = [load_file(_file(tmp_path, text.replace("sources: [fees.md]", "sources: [rates.md]")))]
    report = await run_files(wrong, _bank.build, workdir=tmp_path, model="offline")
    assert "sources: expected ['rates.md'], got ['fees.md']" in report.text()
    assert "citations: expected ['rates.md']" in report.text()


def test_a_missing_knowledge_file_is_named(tmp_path: Path) -> None:
    text = "knowledge: [nowhere.md]\nconversations: [{name: x, turns: [{user: hi}]}]\n"
    with pytest.raises(InvalidConversationFile, match="no file 'nowhere.md'"):
        load_file(_file(tmp_path, text))


class Ask(BaseModel):
    what: str


def test_a_sync_handler_is_refused_when_the_category_is_built() -> None:
    def handler(request: Ask, context: object) -> Outcome:
        return Outcome(instruction="x")

    with pytest.raises(ConfigError, match="the handler .*handler is not async"):
        Category(name="ASK", description="Asking", request=Ask, handler=handler)  # type: ignore[arg-type]


def test_a_category_without_examples_is_warned_about_once() -> None:
    async def handler(request: Ask, context: object) -> Outcome:
        return Outcome(instruction="x")

    bare = Category(name="BARE_FRICTION", description="Asking", request=Ask, handler=handler)
    with capture_logs() as logs:
        Orchestrator([bare], model="offline", audit=False)
        Orchestrator([bare], model="offline", audit=False)
    warned = [e for e in logs if e["event"] == "category.no_examples"]
    assert [e["category"] for e in warned] == ["BARE_FRICTION"]
