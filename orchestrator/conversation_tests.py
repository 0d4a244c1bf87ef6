"""Conversation tests: one YAML file that is a handler regression test and a model evaluation.

    conversations:
      - name: freeze a lost card
        user_id: alice
        turns:
          - user: "I lost my card ending 4242, freeze it"
            category: CARD_FREEZE
            request: {last_four: "4242"}
            handoff: false
            reply_contains: ["frozen"]

Without a model (`script=True`) the expected `category`, `request` and `need_more_info` ARE
the triage and request experts' answers, and the response expert answers with its
instruction, so the file tests the handlers, their state, hand-offs and the instructions
deterministically. With a model they are expectations: each conversation runs `repeat`
times and the report gives pass^k (tau-bench's "every one of k tries succeeds") and the
accuracy of each field. Every run of a conversation gets a fresh SQLite database, so runs
never see each other's state. `frontdesk test` (docs/testing.md) is the command line.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from frontdesk.errors import ConfigError, FrontdeskError, InvalidConversationFile
from frontdesk.experts.providers import FunctionModel, ModelRequest, OfflineModel
from frontdesk.orchestrator._orchestrator import Orchestrator
from frontdesk.orchestrator.config import ModelChoice
from frontdesk.orchestrator.reply import Reply

FIELDS = ("category", "request", "need_more_info", "handoff", "data", "reply_contains")
"""The checks a turn may name, in the order they are reported."""


class TurnSpec(BaseModel):
    """One user message and what its answer must show."""

    model_config = ConfigDict(extra="forbid")

    user: str = Field(min_length=1)
    category: str | None = None
    request: dict[str, Any] | None = None
    """The fields the request must have (others are not compared)."""
    need_more_info: list[str] | None = None
    """The required fields the request expert must find missing."""
    handoff: bool | None = None
    data: dict[str, Any] | None = None
    """Keys the outcome's data must hold, with these values (others are not compared)."""
    reply_contains: list[str] = Field(default_factory=list)
    """Texts the reply must contain (case-insensitive)."""


class ConversationSpec(BaseModel):
    """A named conversation of one user."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    user_id: str | None = None
    turns: list[TurnSpec] = Field(min_length=1)


class ConversationFile(BaseModel):
    """A file of conversations (`path` is where it was read from)."""

    model_config = ConfigDict(extra="forbid")

    conversations: list[ConversationSpec] = Field(min_length=1)
    path: str = ""


def load_file(path: Path | str) -> ConversationFile:
    """Read and check one YAML file.

    Raises:
        InvalidConversationFile: unreadable, not YAML, or not in the format (the message
            names the file and the place).
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InvalidConversationFile(f"{path}: cannot read it: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise InvalidConversationFile(f"{path}: not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise InvalidConversationFile(f"{path}: expected a mapping with a `conversations` list")
    try:
        return ConversationFile.model_validate({**raw, "path": str(path)})
    except ValidationError as e:
        where = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()
        )
        raise InvalidConversationFile(f"{path}: {where}") from e


@dataclass(frozen=True)
class Check:
    """One field of one turn compared."""

    field: str
    passed: bool
    expected: Any
    actual: Any

    def describe(self) -> str:
        """`category: expected CARD_FREEZE, got OTHER`."""
        return f"{self.field}: expected {self.expected!r}, got {self.actual!r}"


@dataclass
class TurnResult:
    """What one turn showed."""

    index: int
    user: str
    checks: list[Check] = field(default_factory=list)
    error: str | None = None
    """The turn raised (a handler error with its exception, a failed turn)."""
    reply: str | None = None
    trace: str | None = None
    """The traceback of the exception behind `error` (a handler's), for the JUnit file."""

    @property
    def passed(self) -> bool:
        """No error and every check passed."""
        return self.error is None and all(c.passed for c in self.checks)

    def describe(self) -> str:
        """`turn 2 ("I lost my card"): category: expected ..., got ...`."""
        problems = (
            [self.error] if self.error else [c.describe() for c in self.checks if not c.passed]
        )
        return f"turn {self.index} ({_short(self.user)!r}): " + "; ".join(problems)


@dataclass
class RunResult:
    """One run of one conversation."""

    run: int
    turns: list[TurnResult]
    seconds: float

    @property
    def passed(self) -> bool:
        """Every turn ran and passed."""
        return all(t.passed for t in self.turns)

    @property
    def failed_turn(self) -> TurnResult | None:
        """The first turn that failed, if any."""
        return next((t for t in self.turns if not t.passed), None)


@dataclass
class ConversationResult:
    """Every run of one conversation."""

    file: str
    name: str
    runs: list[RunResult]

    @property
    def passed(self) -> bool:
        """Every run passed."""
        return all(r.passed for r in self.runs)

    def pass_hat(self, k: int) -> float:
        """pass^k: the chance that k runs drawn from these all pass, C(c, k) / C(n, k)."""
        n, c = len(self.runs), sum(r.passed for r in self.runs)
        return math.comb(c, k) / math.comb(n, k) if 0 < k <= n else 0.0


@dataclass
class Report:
    """Every conversation of every file, and how often each field was right."""

    conversations: list[ConversationResult]
    scripted: bool
    repeat: int

    @property
    def passed(self) -> bool:
        """Every check of every run of every conversation passed."""
        return all(c.passed for c in self.conversations)

    def field_accuracy(self) -> dict[str, tuple[int, int]]:
        """Field -> (checks passed, checks made), over every turn that ran."""
        counts: dict[str, list[int]] = {}
        for conv in self.conversations:
            for run in conv.runs:
                for turn in run.turns:
                    for check in turn.checks:
                        c = counts.setdefault(check.field, [0, 0])
                        c[0] += check.passed
                        c[1] += 1
        return {f: (counts[f][0], counts[f][1]) for f in FIELDS if f in counts}

    def text(self) -> str:
        """The report for a terminal."""
        mode = "scripted experts" if self.scripted else f"a model, {self.repeat} run(s) each"
        lines = [f"frontdesk test: {len(self.conversations)} conversation(s), {mode}"]
        for conv in self.conversations:
            n = len(conv.runs)
            ok = sum(r.passed for r in conv.runs)
            hats = (
                ""
                if n == 1
                else f"; pass^1 {conv.pass_hat(1):.2f}, pass^{n} {conv.pass_hat(n):.2f}"
            )
            verdict = "PASS" if conv.passed else "FAIL"
            lines.append(f"{verdict} {conv.file}: {conv.name} ({ok}/{n} runs{hats})")
            for run in conv.runs:
                turn = run.failed_turn
                if turn is not None:
                    lines.append(f"     run {run.run}, {turn.describe()}")
        accuracy = self.field_accuracy()
        if accuracy:
            parts = [f"{f} {p}/{t} ({100 * p / t:.0f}%)" for f, (p, t) in accuracy.items()]
            lines.append("field accuracy: " + ", ".join(parts))
        failed = sum(not c.passed for c in self.conversations)
        lines.append("all passed" if failed == 0 else f"{failed} conversation(s) failed")
        return "\n".join(lines)


AppFactory = Callable[[ModelChoice], Orchestrator]
"""Builds the application's Orchestrator with the model given (`--app module:function`)."""


async def run_files(
    files: Sequence[ConversationFile],
    build: AppFactory,
    *,
    workdir: Path,
    model: ModelChoice = None,
    repeat: int = 1,
) -> Report:
    """Run every conversation of `files`, `repeat` times each, on fresh SQLite databases in
    `workdir`: scripted experts when `model` is `None`, else the model as given.

    Raises:
        ConfigError: `repeat` below 1, or `build` did not use the model it was given.
        InvalidConversationFile: a conversation names a category the app does not have.
    """
    if repeat < 1:
        raise ConfigError(f"--repeat must be 1 or more, got {repeat}")
    scripted = model is None
    results = []
    count = 0
    for spec_file in files:
        for conv in spec_file.conversations:
            runs = []
            for run in range(1, repeat + 1):
                count += 1
                store = f"sqlite:///{workdir / f'run-{count}.db'}"
                runs.append(await _run(spec_file.path, conv, build, model, store, run))
            results.append(ConversationResult(file=spec_file.path, name=conv.name, runs=runs))
    return Report(conversations=results, scripted=scripted, repeat=repeat)


async def _run(
    path: str, conv: ConversationSpec, build: AppFactory, model: ModelChoice, store: str, run: int
) -> RunResult:
    script = Script()
    orch = build(script.model if model is None else model)
    if model is None and orch.models.get("triage") is not script.model:
        raise ConfigError(
            "frontdesk test needs --app to name a function that passes its `model` argument"
            " to Orchestrator(model=...), so that the experts can be scripted"
        )
    _check_categories(path, conv, orch)
    script.orchestrator = orch
    orch.use_store(store)
    orch.handler_errors = "raise"  # A handler's exception is the turn's failure, traceback kept.
    turns: list[TurnResult] = []
    started = time.perf_counter()
    try:
        for index, spec in enumerate(conv.turns, start=1):
            script.turn = spec
            result = TurnResult(index=index, user=spec.user)
            turns.append(result)
            try:
                reply = await orch.handle(
                    f"{_slug(conv.name)}-{run}",
                    spec.user,
                    user_id=conv.user_id,
                    client_message_id=f"turn-{index}",
                )
            except FrontdeskError as e:
                cause = e.__cause__
                what = f"{type(cause).__name__}: {cause}" if cause is not None else str(e)
                result.error = f"{type(e).__name__} ({what})"
                result.trace = "".join(traceback.format_exception(cause or e))
                break
            result.reply = reply.text
            result.checks = checks(spec, reply)
    finally:
        await orch.aclose()
    return RunResult(run=run, turns=turns, seconds=time.perf_counter() - started)


def checks(spec: TurnSpec, reply: Reply) -> list[Check]:
    """Compare one reply with what its turn expects (only the fields the turn names)."""
    found: list[Check] = []
    if spec.category is not None:
        found.append(
            Check("category", reply.category == spec.category, spec.category, reply.category)
        )
    if spec.request is not None:
        actual = None if reply.request is None else reply.request.model_dump(mode="json")
        ok = actual is not None and all(actual.get(k) == v for k, v in spec.request.items())
        found.append(Check("request", ok, spec.request, actual))
    if spec.need_more_info is not None:
        missing = None if reply.need_more_info is None else reply.need_more_info.missing
        ok = missing is not None and sorted(missing) == sorted(spec.need_more_info)
        found.append(Check("need_more_info", ok, spec.need_more_info, missing))
    if spec.handoff is not None:
        found.append(Check("handoff", reply.handoff == spec.handoff, spec.handoff, reply.handoff))
    if spec.data is not None:
        data = {} if reply.outcome is None else reply.outcome.data
        ok = all(k in data and data[k] == v for k, v in spec.data.items())
        found.append(Check("data", ok, spec.data, data))
    if spec.reply_contains:
        lowered = reply.text.lower()
        absent = [t for t in spec.reply_contains if t.lower() not in lowered]
        found.append(Check("reply_contains", not absent, spec.reply_contains, reply.text))
    return found


@dataclass
class Script:
    """The scripted experts of one run: each answers from the turn being run.

    Triage answers the turn's `category`, the request expert its `request` (or its
    `need_more_info`), the response expert its instruction, the memory expert no facts;
    what a turn leaves out (and the summariser) is answered by the offline stand-in.
    """

    turn: TurnSpec | None = None
    orchestrator: Orchestrator | None = None
    model: FunctionModel = field(init=False)

    def __post_init__(self) -> None:
        self.model = FunctionModel(self.answer, name="scripted")

    def answer(self, request: ModelRequest) -> Any:
        """The scripted answer to one expert call."""
        turn = self.turn
        if turn is not None and request.expert == "triage" and turn.category is not None:
            return {"category": turn.category, "reason": "scripted by the conversation test"}
        if turn is not None and request.expert == "request" and self._for_turn(request, turn):
            if turn.need_more_info is not None:
                missing = turn.need_more_info
                return {
                    "need_more_info": {
                        "missing": missing,
                        "question": f"What is your {', '.join(missing)}?",
                    }
                }
            if turn.request is not None:
                return {"request": turn.request}
        if (
            request.expert == "response"
            and request.messages
            and request.messages[-1]["role"] == "assistant"
        ):
            return request.messages[-1]["content"]
        if request.expert == "memory":
            return {"facts": []}
        return OfflineModel().answer(request)

    def _for_turn(self, request: ModelRequest, turn: TurnSpec) -> bool:
        """Whether the call extracts the turn's category (a speculative call for the
        category before may be asking for another one)."""
        if self.orchestrator is None or turn.category is None:
            return True
        category = self.orchestrator.categories.get(turn.category)
        wanted = None if category is None else category.request
        return getattr(request.output_type, "request_model", None) is wanted


def _check_categories(path: str, conv: ConversationSpec, orch: Orchestrator) -> None:
    known = {*orch.categories, "OTHER", "HUMAN"}
    for index, turn in enumerate(conv.turns, start=1):
        if turn.category is not None and turn.category not in known:
            raise InvalidConversationFile(
                f"{path}: {conv.name!r} turn {index} names the category {turn.category!r},"
                f" which the app does not have (it has: {', '.join(sorted(known))})"
            )


def write_junit(report: Report, path: Path | str) -> None:
    """Write `report` as JUnit XML (one testcase per run of each conversation) for CI."""
    root = ET.Element("testsuites", name="frontdesk test")
    suites: dict[str, ET.Element] = {}
    for conv in report.conversations:
        suite = suites.get(conv.file)
        if suite is None:
            suite = suites[conv.file] = ET.SubElement(root, "testsuite", name=conv.file)
        for run in conv.runs:
            name = (
                conv.name
                if len(conv.runs) == 1
                else f"{conv.name} [run {run.run}/{len(conv.runs)}]"
            )
            case = ET.SubElement(
                suite, "testcase", classname=conv.file, name=name, time=f"{run.seconds:.3f}"
            )
            turn = run.failed_turn
            if turn is not None:
                kind = "error" if turn.error else "failure"
                problem = ET.SubElement(case, kind, message=turn.describe())
                details = [turn.describe()]
                if turn.reply is not None:
                    details.append(f"reply: {turn.reply}")
                if turn.trace is not None:
                    details.append(turn.trace)
                problem.text = "\n".join(details)
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for suite in suites.values():
        cases = suite.findall("testcase")
        counts = {
            "tests": len(cases),
            "failures": sum(c.find("failure") is not None for c in cases),
            "errors": sum(c.find("error") is not None for c in cases),
        }
        seconds = sum(float(c.get("time", "0")) for c in cases)
        suite.attrib.update({k: str(v) for k, v in counts.items()} | {"time": f"{seconds:.3f}"})
        for k, v in counts.items():
            totals[k] += v
    root.attrib.update({k: str(v) for k, v in totals.items()})
    ET.indent(root)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def _slug(name: str) -> str:
    return "-".join("".join(ch if ch.isalnum() else " " for ch in name.lower()).split())[:60] or "c"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
