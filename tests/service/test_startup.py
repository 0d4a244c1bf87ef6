"""`frontdesk serve` fails closed (service/_startup.py): no master key, or the offline
stand-in by default, is refused unless asked for; the start-up lines hold no secret."""

from __future__ import annotations

import base64
import os

import pytest

from frontdesk import Orchestrator
from frontdesk.errors import ConfigError
from frontdesk.examples.potato_shop import categories
from frontdesk.service._startup import Startup, describe, refuse_unsafe
from tests.service import _shop

KEY = base64.b64encode(os.urandom(32)).decode()
DB = "postgresql://frontdesk:hunter2@db.internal/frontdesk"


def startup(*, allow: bool = False, workers: int = 1) -> Startup:
    return Startup(db=DB, workers=workers, allow_clear_audit=allow)


def test_no_master_key_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FRONTDESK_MASTER_KEY", raising=False)
    with pytest.raises(ConfigError, match="FRONTDESK_MASTER_KEY is not set") as refused:
        refuse_unsafe(_shop.build("sqlite:///x.db"), startup())
    assert "--allow-clear-audit" in str(refused.value) and "\n" not in str(refused.value)
    refuse_unsafe(_shop.build("sqlite:///x.db"), startup(allow=True))  # told: starts
    monkeypatch.setenv("FRONTDESK_MASTER_KEY", KEY)
    refuse_unsafe(_shop.build("sqlite:///x.db"), startup())


def test_a_key_passed_to_the_app_counts_as_a_master_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FRONTDESK_MASTER_KEY", raising=False)
    orch = Orchestrator([_shop.COUNT], model=_shop.shop_model(), audit_key=KEY)
    assert orch.audit_encrypted
    refuse_unsafe(orch, startup())
    assert not Orchestrator([_shop.COUNT], model="offline", audit=False).audit_encrypted


def test_the_offline_stand_in_by_default_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRONTDESK_MASTER_KEY", KEY)
    with pytest.raises(ConfigError, match="--model offline"):
        refuse_unsafe(Orchestrator(categories()), startup())
    refuse_unsafe(Orchestrator(categories(), model="offline"), startup())  # named: starts
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key-0123456789")
    refuse_unsafe(Orchestrator(categories()), startup())  # a key: a real model


def test_the_start_up_lines_say_what_runs_and_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRONTDESK_MASTER_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-abcdefghijklmnop0123")
    orch = Orchestrator(
        categories(), model={"triage": "openai:gpt-4.1-nano", "default": "openai:gpt-4.1-mini"}
    )
    lines = describe(orch, startup(workers=4))
    assert [line.split(":")[0] for line in lines] == ["models", "store", "audit", "jobs", "workers"]
    assert lines[0].startswith("models: triage=openai:gpt-4.1-nano, request=openai:gpt-4.1-mini")
    assert lines[1] == "store: postgresql://frontdesk:***@db.internal/frontdesk"
    assert lines[2] == "audit: payloads encrypted per user (master key set)"
    assert lines[4].startswith("workers: 4")
    text = "\n".join(lines)
    assert "hunter2" not in text and KEY not in text and "sk-proj" not in text
    monkeypatch.delenv("FRONTDESK_MASTER_KEY")
    assert "IN CLEAR" in describe(orch, startup(allow=True))[2]
