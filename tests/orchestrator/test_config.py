"""`orchestrator/config.py`: falling back to the offline stand-in is said, once."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from frontdesk.orchestrator import config


def test_the_offline_fallback_is_a_warning_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "_warned", [])
    with capture_logs() as logs:
        config.resolve_models(None)
        config.resolve_models(None)
        config.resolve_models("offline")  # named: no warning
    warnings = [e for e in logs if e["event"] == "models.offline_fallback"]
    assert len(warnings) == 1 and warnings[0]["log_level"] == "warning"
    assert "ANTHROPIC_API_KEY" in warnings[0]["detail"]


def test_a_key_or_a_named_model_is_no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config.offline_by_default(None)
    assert not config.offline_by_default("offline")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert not config.offline_by_default(None)
    monkeypatch.setattr(config, "_warned", [])
    with capture_logs() as logs:
        config.resolve_models(None)
    assert not [e for e in logs if e["event"] == "models.offline_fallback"]
