"""`frontdesk.telemetry`: optional API, no-op without a provider, trace ids on log lines."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from opentelemetry import trace

from frontdesk import telemetry
from frontdesk.logs import TraceIdsProcessor
from tests._otel import recorded_spans

# Runs one turn on a FunctionModel whose function says what the telemetry saw mid-call.
TURN = """
import asyncio, json, sys
from frontdesk import Orchestrator, telemetry
from frontdesk.experts.providers import FunctionModel
seen = []
def answer(request):
    seen.append(telemetry.current_ids())
    if request.expert == "triage":
        return {"category": "OTHER", "reason": "chat"}
    return "hi"
async def main():
    orch = Orchestrator([], model=FunctionModel(answer), store="sqlite:///" + sys.argv[1])
    reply = await orch.handle("c", "hello")
    await orch.aclose()
    print(json.dumps({"reply": reply.text, "available": telemetry.available(), "seen": seen}))
asyncio.run(main())
"""

# Makes the named top-level packages unimportable, as if they were not installed.
HIDE = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Hide())
"""


def _run(code: str, tmp: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, tmp], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_the_library_runs_a_turn_without_opentelemetry_or_prometheus_installed(
    tmp_path: object,
) -> None:
    hide = HIDE.format(hidden={"opentelemetry", "prometheus_client"})
    out = _run(hide + TURN, f"{tmp_path}/a.db")
    assert out == '{"reply": "hi", "available": false, "seen": [null, null]}'


def test_with_the_api_but_no_tracer_provider_nothing_is_recorded(tmp_path: object) -> None:
    out = _run(TURN, f"{tmp_path}/b.db")
    assert out == '{"reply": "hi", "available": true, "seen": [null, null]}'


def test_log_lines_carry_the_ids_of_the_span_in_progress() -> None:
    add_ids = TraceIdsProcessor()
    assert add_ids(None, "info", {"event": "outside"}) == {"event": "outside"}
    with recorded_spans(), trace.get_tracer("test").start_as_current_span("work") as span:
        line = add_ids(None, "info", {"event": "inside"})
        context = span.get_span_context()
    assert line["trace_id"] == format(context.trace_id, "032x")
    assert line["span_id"] == format(context.span_id, "016x")
    assert telemetry.current_ids() is None  # the span has ended


def test_provider_and_model_names_follow_the_genai_conventions() -> None:
    assert telemetry.provider_of("anthropic:claude-haiku-4-5") == "anthropic"
    assert telemetry.provider_of("openai:llama3@http://127.0.0.1:11434/v1") == "openai"
    assert telemetry.request_model_of("openai:llama3@http://127.0.0.1:11434/v1") == "llama3"
    assert telemetry.request_model_of("offline") == "offline"


def test_background_work_is_a_trace_of_its_own_linked_to_the_turn() -> None:
    tracer = trace.get_tracer("test")
    with recorded_spans() as spans:
        with tracer.start_as_current_span("frontdesk.turn") as turn:
            link = telemetry.link_to_current()
        with telemetry.background("frontdesk.compaction", link, conversation_id="c"):
            pass
    (work,) = [s for s in spans.get_finished_spans() if s.name == "frontdesk.compaction"]
    assert work.parent is None and work.context is not None
    assert work.context.trace_id != turn.get_span_context().trace_id
    assert [lk.context.span_id for lk in work.links] == [turn.get_span_context().span_id]
    assert (work.attributes or {})["gen_ai.conversation.id"] == "c"


def test_nothing_is_linked_outside_a_span() -> None:
    assert telemetry.link_to_current() is None
    code = textwrap.dedent(
        """
        from frontdesk import telemetry
        with telemetry.background("frontdesk.compaction", None) as span:
            print(span.is_recording())
        """
    )
    assert _run(code, "") == "False"
