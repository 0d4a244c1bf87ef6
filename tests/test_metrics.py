"""`frontdesk.metrics`: the scrape of several worker processes adds their counts up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from frontdesk import metrics

WORKER = """
from frontdesk import metrics
metrics.turn(category="ORDERS", outcome="answered", seconds=0.25)
metrics.expert_call(expert="triage", provider="anthropic", request_model="claude-haiku-4-5",
                    seconds=0.1, input_tokens=100, output_tokens=7)
metrics.cost(expert="triage", model="claude-haiku-4-5", usd=0.5)
"""

SCRAPE = """
import sys
from frontdesk import metrics
snapshot = metrics.OperationsSnapshot(handoff_queue_length=2, handoff_longest_wait_seconds=9.5)
sys.stdout.write(metrics.exposition(snapshot).decode())
"""


def _python(code: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _value(text: str, name: str, **labels: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and set(labels.items()) <= set(s.labels.items())
    )


def test_multiprocess_mode_adds_every_workers_counts(tmp_path: Path) -> None:
    env = {**os.environ, metrics.MULTIPROCESS_ENV: str(tmp_path)}
    for _ in range(3):  # three workers, one turn each
        _python(WORKER, env)
    text = _python(SCRAPE, env)
    assert _value(text, "frontdesk_turns_total", frontdesk_category="ORDERS") == 3
    assert _value(text, "frontdesk_turn_duration_seconds_sum") == 0.75
    assert _value(text, "gen_ai_client_token_usage_sum", gen_ai_token_type="input") == 300
    assert _value(text, "gen_ai_client_operation_duration_seconds_count") == 3
    assert _value(text, "frontdesk_cost_usd_total", frontdesk_expert="triage") == 1.5
    assert _value(text, "frontdesk_handoff_queue_length") == 2
    assert _value(text, "frontdesk_handoff_longest_wait_seconds") == 9.5
    assert _value(text, "frontdesk_store_up") == 1


def test_an_unreadable_store_is_said_and_the_rest_still_scraped() -> None:
    text = metrics.exposition(None).decode()
    assert _value(text, "frontdesk_store_up") == 0
    assert "frontdesk_handoff_queue_length" not in text
    assert "# TYPE gen_ai_client_token_usage histogram" in text


def _sample(name: str, **labels: str) -> float:
    """A value of the default registry (this process's counts)."""
    from prometheus_client import REGISTRY

    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_a_label_set_counted_before_is_counted_into_its_metrics_own_child() -> None:
    """`_child` finds a counted label set in the metric's own table: the same child that
    `labels()` gives; once the metric drops it (`remove`), the next count makes a new one
    rather than counting into the dropped child."""
    instruments = metrics._instruments
    assert instruments is not None
    cost = instruments.cost
    labels = ("triage", "child-test-model", "")
    metrics.cost(expert="triage", model="child-test-model", usd=1.0)
    assert metrics._child(cost, *labels) is cost.labels(*labels)
    metrics.cost(expert="triage", model="child-test-model", usd=2.0)
    name = "frontdesk_cost_usd_total"
    keys = {"frontdesk_expert": "triage", "gen_ai_request_model": "child-test-model"}
    assert _sample(name, **keys, frontdesk_variant="") == 3.0
    cost.remove(*labels)
    metrics.cost(expert="triage", model="child-test-model", usd=0.5)
    assert _sample(name, **keys, frontdesk_variant="") == 0.5


def test_an_expert_calls_counts_carry_its_error_type() -> None:
    """Without a tracer, `telemetry.expert_call` still counts the call, its error class
    included (a plain object, not a generator, counts it)."""
    from frontdesk import telemetry

    def count(error: str) -> float:
        return _sample(
            "gen_ai_client_operation_duration_seconds_count",
            gen_ai_operation_name="chat",
            gen_ai_provider_name="countingtest",
            gen_ai_request_model="m-1",
            frontdesk_expert="triage",
            error_type=error,
        )

    before_ok, before_failed = count(""), count("KeyError")
    with telemetry.expert_call("triage", "countingtest:m-1") as span:
        span.answered(
            model="",
            stop_reason=None,
            input_tokens=1,
            output_tokens=1,
            cache_read_tokens=0,
            cache_write_tokens=0,
            attempts=1,
        )
    with pytest.raises(KeyError), telemetry.expert_call("triage", "countingtest:m-1"):
        raise KeyError("x")
    assert (count(""), count("KeyError")) == (before_ok + 1, before_failed + 1)
