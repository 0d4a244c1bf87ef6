"""`orchestrator/config.py`: falling back to the offline stand-in is said, once, when an
orchestrator left to the defaults opens."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from frontdesk import Orchestrator
from frontdesk.examples.potato_shop import categories
from frontdesk.orchestrator import config

pytestmark = pytest.mark.anyio


async def test_the_offline_fallback_is_a_warning_said_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(config, "_warned", [])
    with capture_logs() as logs:
        quiet = Orchestrator(categories(), store=f"sqlite:///{tmp_path / 'a.db'}")
        assert quiet.offline_by_default and logs == []  # built, not opened: nothing said
        for name in ("a", "b"):
            orch = Orchestrator(categories(), store=f"sqlite:///{tmp_path / name}.db")
            await orch.open()
            await orch.aclose()
        named = Orchestrator(categories(), model="offline", store=f"sqlite:///{tmp_path}/c.db")
        await named.open()
        await named.aclose()
    warnings = [e for e in logs if e["event"] == "models.offline_fallback"]
    assert len(warnings) == 1 and warnings[0]["log_level"] == "warning"
    assert "ANTHROPIC_API_KEY" in warnings[0]["detail"]


def test_a_key_or_a_named_model_is_no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config.offline_by_default(None)
    assert not config.offline_by_default("offline")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert not config.offline_by_default(None)
