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
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from frontdesk.errors import ConfigError, FrontdeskError, InvalidConversationFile
from frontdesk.experts.providers import FunctionModel, Model, ModelRequest, OfflineModel
from frontdesk.experts.providers.offline import reply_from_instruction
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.config import ModelChoice
from frontdesk.orchestrator.evaluation import expected_value
from frontdesk.orchestrator.reply import Reply
from frontdesk.orchestrator.simulation import (
    Exchange,
    ExpectSpec,
    SimulateSpec,
    Verdict,
    handler_calls,
    judge,
    simulate,
    simulation_model,
)

FIELDS = (
    "category",
    "request",
    "need_more_info",
    "handoff",
    "data",
    "reply_contains",
    "sources",
    "citations",
)
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
    sources: list[str] | None = None
    """Documents (names as in the file's `knowledge:`) whose passages the reply was given."""
    citations: list[str] | None = None
    """Documents whose passages the reply cites (`Reply.citations`); `[]`: it cites none."""


class ConversationSpec(BaseModel):
    """A named conversation of one user: scripted `turns`, or a `simulate:`d customer."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    user_id: str | None = None
    turns: list[TurnSpec] = Field(default_factory=list)
    simulate: SimulateSpec | None = None
    """A user model plays this persona toward this goal (instead of `turns`)."""
    expect: ExpectSpec | None = None
    """What must have happened by the end (checked on the turns' results)."""
    judge: list[str] = Field(default_factory=list)
    """Criteria the judge model gives a verdict on, each with its reason."""

    @model_validator(mode="after")
    def _turns_or_simulate(self) -> ConversationSpec:
        if bool(self.turns) == (self.simulate is not None):
            raise ValueError("give either `turns` (a list of user messages) or `simulate`")
        return self


class ConversationFile(BaseModel):
    """A file of conversations (`path` is where it was read from)."""

    model_config = ConfigDict(extra="forbid")

    conversations: list[ConversationSpec] = Field(min_length=1)
    knowledge: list[str] = Field(default_factory=list)
    """Documents (paths relative to the file) added to each run's knowledge base."""
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
        loaded = ConversationFile.model_validate({**raw, "path": str(path)})
    except ValidationError as e:
        where = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()
        )
        raise InvalidConversationFile(f"{path}: {where}") from e
    for document in loaded.knowledge:
        if not (path.parent / document).is_file():
            raise InvalidConversationFile(
                f"{path}: knowledge: no file {document!r} (paths are relative to this file)"
            )
    return loaded


async def _add_knowledge(orch: Orchestrator, spec_file: ConversationFile) -> None:
    """Add the file's documents to a run's knowledge base, named as the file names them."""
    base = Path(spec_file.path).parent
    for document in spec_file.knowledge:
        await orch.knowledge.add(document, (base / document).read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Check:
    """One field of one turn (or of a whole conversation's `expect:`) compared."""

    field: str
    passed: bool
    expected: Any
    actual: Any
    detail: str | None = None
    """What differs, when more precise than the two values (each differing field)."""

    def describe(self) -> str:
        """`category: expected CARD_FREEZE, got OTHER`."""
        if self.detail is not None:
            return f"{self.field}: {self.detail}"
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
    checks: list[Check] = field(default_factory=list)
    """The conversation's `expect:` checks."""
    verdicts: list[Verdict] = field(default_factory=list)
    """The judge's verdicts, one per criterion."""
    error: str | None = None
    """The simulation or the judge failed (a model error, a turn that raised)."""
    trace: str | None = None

    @property
    def passed(self) -> bool:
        """Every turn ran and passed, and every expectation and verdict with them."""
        return (
            self.error is None
            and all(t.passed for t in self.turns)
            and all(c.passed for c in self.checks)
            and all(v.passed for v in self.verdicts)
        )

    @property
    def failed_turn(self) -> TurnResult | None:
        """The first turn that failed, if any."""
        return next((t for t in self.turns if not t.passed), None)

    def problems(self) -> list[str]:
        """What failed, in order: the first failed turn, then expectations and verdicts."""
        found = []
        if self.error is not None:
            found.append(self.error)
        turn = self.failed_turn
        if turn is not None:
            found.append(turn.describe())
        found += ["expect " + c.describe() for c in self.checks if not c.passed]
        found += [
            f"judge: {v.criterion!r} failed: {v.reason}" for v in self.verdicts if not v.passed
        ]
        return found


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
                lines += [f"     run {run.run}, {problem}" for problem in run.problems()]
                lines += [
                    f"     run {run.run}, judge {'PASS' if v.passed else 'FAIL'}"
                    f" {v.criterion!r}: {v.reason}"
                    for v in run.verdicts
                    if v.passed
                ]
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
    user: Model | None = None,
    judge: Model | None = None,
) -> Report:
    """Run every conversation of `files`, `repeat` times each, on fresh SQLite databases in
    `workdir`: scripted experts when `model` is `None`, else the model as given.

    `user` and `judge` play the simulated customer and judge the conversations (`simulate:`,
    `judge:`); without them, the app's model map's `"user"` and `"judge"` entries do.

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
                runs.append(await _run(spec_file, conv, build, model, store, run, (user, judge)))
            results.append(ConversationResult(file=spec_file.path, name=conv.name, runs=runs))
    return Report(conversations=results, scripted=scripted, repeat=repeat)


async def _run(
    spec_file: ConversationFile,
    conv: ConversationSpec,
    build: AppFactory,
    model: ModelChoice,
    store: str,
    run: int,
    players: tuple[Model | None, Model | None] = (None, None),
) -> RunResult:
    script = Script()
    orch = build(script.model if model is None else model)
    if model is None and orch.models.get("triage") is not script.model:
        raise ConfigError(
            "frontdesk test needs --app to name a function that passes its `model` argument"
            " to Orchestrator(model=...), so that the experts can be scripted"
        )
    _check_spec(spec_file.path, conv, orch)
    script.orchestrator = orch
    orch.use_store(store)
    orch.handler_errors = "raise"  # A handler's exception is the turn's failure, traceback kept.
    result = RunResult(run=run, turns=[], seconds=0.0)
    started = time.perf_counter()
    conversation_id = f"{_slug(conv.name)}-{run}"
    try:
        await _add_knowledge(orch, spec_file)
        if conv.simulate is not None:
            exchanges = await _simulated(orch, conv, conversation_id, players[0], result)
        else:
            exchanges = await _scripted(orch, conv, conversation_id, script, result)
        replies = [e.reply for e in exchanges]
        if conv.expect is not None and result.error is None:
            result.checks = expect_checks(conv.expect, orch, replies)
        if conv.judge and result.error is None:
            try:
                judge_model = simulation_model(orch, "judge", players[1])
                result.verdicts = await judge(judge_model, conv.judge, exchanges)
            except FrontdeskError as e:
                result.error = f"the judge failed: {type(e).__name__}: {e}"
    finally:
        await orch.aclose()
    result.seconds = time.perf_counter() - started
    return result


async def _scripted(
    orch: Orchestrator, conv: ConversationSpec, conversation_id: str, script: Script, out: RunResult
) -> list[Exchange]:
    exchanges = []
    for index, spec in enumerate(conv.turns, start=1):
        script.turn = spec
        result = TurnResult(index=index, user=spec.user)
        out.turns.append(result)
        try:
            reply = await orch.handle(
                conversation_id, spec.user, user_id=conv.user_id, client_message_id=f"turn-{index}"
            )
        except FrontdeskError as e:
            _failed(result, e)
            break
        result.reply = reply.text
        result.checks = checks(spec, reply, orch)
        exchanges.append(Exchange(user=spec.user, reply=reply))
    return exchanges


async def _simulated(
    orch: Orchestrator,
    conv: ConversationSpec,
    conversation_id: str,
    user: Model | None,
    out: RunResult,
) -> list[Exchange]:
    assert conv.simulate is not None
    user_model = simulation_model(orch, "user", user)
    try:
        done = await simulate(
            orch,
            conv.simulate,
            user=user_model,
            conversation_id=conversation_id,
            user_id=conv.user_id,
        )
    except FrontdeskError as e:
        cause = e.__cause__
        what = f"{type(cause).__name__}: {cause}" if cause is not None else str(e)
        out.error = f"the simulated conversation failed: {type(e).__name__} ({what})"
        out.trace = "".join(traceback.format_exception(cause or e))
        return []
    for index, exchange in enumerate(done.exchanges, start=1):
        out.turns.append(TurnResult(index=index, user=exchange.user, reply=exchange.reply.text))
    return done.exchanges


def _failed(result: TurnResult, e: FrontdeskError) -> None:
    cause = e.__cause__
    what = f"{type(cause).__name__}: {cause}" if cause is not None else str(e)
    result.error = f"{type(e).__name__} ({what})"
    result.trace = "".join(traceback.format_exception(cause or e))


def expect_checks(expect: ExpectSpec, orch: Orchestrator, replies: Sequence[Reply]) -> list[Check]:
    """Compare what a whole conversation did with its `expect:`."""
    found: list[Check] = []
    routed = [r.category for r in replies]
    if expect.category is not None:
        found.append(Check("category", expect.category in routed, expect.category, routed))
    if expect.request is not None:
        extracted = [
            r.request
            for r in replies
            if r.request is not None and expect.category in (None, r.category)
        ]
        category = orch.categories.get(expect.category or "")
        model = category.request if category is not None else None
        found.append(request_check(expect.request, extracted[-1] if extracted else None, model))
    if expect.handler_calls is not None:
        calls = handler_calls(orch, replies)
        found.append(
            Check("handler_calls", calls == expect.handler_calls, expect.handler_calls, calls)
        )
    if expect.handoff is not None:
        handed = any(r.handoff for r in replies)
        found.append(Check("handoff", handed == expect.handoff, expect.handoff, handed))
    return found


def request_check(
    expected: dict[str, Any], actual: BaseModel | None, model: type[BaseModel] | None
) -> Check:
    """The request's fields against the expected ones, compared after the request model's
    own validation (`amount: 12` equals `Decimal("12")`), naming each field that differs
    and each expected value the model refuses."""
    dumped = None if actual is None else actual.model_dump(mode="json")
    model = model or (type(actual) if actual is not None else None)
    problems = []
    wanted: dict[str, Any] = dict(expected)
    if model is not None:
        for name, want in expected.items():
            info = model.model_fields.get(name)
            if info is None:
                problems.append(f"{model.__name__} has no field {name!r}")
                continue
            try:
                wanted[name] = expected_value(info, want)
            except ValidationError as e:
                error = e.errors()[0]["msg"] if e.errors() else str(e)
                problems.append(f"{name}: the expected {want!r} is not valid ({error})")
    if actual is None:
        problems.append("expected a request, got none")
    else:
        for name, want in wanted.items():
            if name in model.model_fields if model is not None else True:
                got = getattr(actual, name, None)
                if got != want:
                    problems.append(f"{name}: expected {want!r}, got {got!r}")
    detail = "; ".join(problems) if problems else None
    return Check("request", not problems, expected, dumped, detail)


def checks(spec: TurnSpec, reply: Reply, orch: Orchestrator | None = None) -> list[Check]:
    """Compare one reply with what its turn expects (only the fields the turn names)."""
    found: list[Check] = []
    if spec.category is not None:
        found.append(
            Check("category", reply.category == spec.category, spec.category, reply.category)
        )
    if spec.request is not None:
        category = None if orch is None else orch.categories.get(spec.category or "")
        model = None if category is None else category.request
        found.append(request_check(spec.request, reply.request, model))
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
    if spec.sources is not None:
        given = sorted({p.source for p in reply.sources})
        ok = set(spec.sources) <= set(given) and (bool(spec.sources) or not given)
        found.append(Check("sources", ok, spec.sources, given))
    if spec.citations is not None:
        cited = sorted({p.source for p in reply.citations})
        ok = set(spec.citations) <= set(cited) and (bool(spec.citations) or not cited)
        found.append(Check("citations", ok, spec.citations, cited))
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
                return {"request": _as_model_reads(request, turn.request)}
        if (
            request.expert == "response"
            and request.messages
            and request.messages[-1]["role"] == "assistant"
        ):
            # The instruction said as the offline stand-in says it ("Tell the user X" -> "X."):
            # a verbatim copy would be taken for an echoing model and replaced (fallbacks);
            # citing the passages sent of the documents the turn's `citations:` names.
            return reply_from_instruction(request.messages[-1]["content"]) + _cites(request, turn)
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


def _cites(request: ModelRequest, turn: TurnSpec | None) -> str:
    """The scripted reply's citation markers (`[2]`): the passages sent whose document the
    turn's `citations:` names (`experts.citations`)."""
    if turn is None or not turn.citations:
        return ""
    wanted = set(turn.citations)
    return "".join(f" [{i}]" for i, p in enumerate(request.passages, 1) if p.source in wanted)


def _as_model_reads(request: ModelRequest, values: dict[str, Any]) -> dict[str, Any]:
    """A scripted request's values as its model reads them (`last_four: 4242` -> "4242")."""
    model = getattr(request.output_type, "request_model", None)
    fields = model.model_fields if isinstance(model, type) and issubclass(model, BaseModel) else {}
    out = dict(values)
    for name, value in values.items():
        if name in fields:
            try:
                out[name] = expected_value(fields[name], value)
            except ValidationError:
                pass  # Kept as written: the request model's refusal is the turn's result.
    return out


def _check_spec(path: str, conv: ConversationSpec, orch: Orchestrator) -> None:
    """Refuse, before anything runs, a category the app lacks and a field its request
    model lacks (a misspelt `need_more_info: [amout]` would pass in scripted mode)."""
    known = {*orch.categories, "OTHER", "HUMAN"}
    named: list[tuple[str, str | None, TurnSpec | None]] = [
        (f"turn {i}", t.category, t) for i, t in enumerate(conv.turns, start=1)
    ]
    if conv.expect is not None:
        named.append(("expect", conv.expect.category, None))
    for where, name, turn in named:
        if name is not None and name not in known:
            raise InvalidConversationFile(
                f"{path}: {conv.name!r} {where} names the category {name!r},"
                f" which the app does not have (it has: {', '.join(sorted(known))})"
            )
        category = orch.categories.get(name or "")
        if turn is None or category is None or category.request is None:
            continue
        fields = category.request.model_fields
        for key in [*(turn.need_more_info or []), *(turn.request or {})]:
            if key not in fields:
                raise InvalidConversationFile(
                    f"{path}: {conv.name!r} {where} names the field {key!r}, which"
                    f" {category.request.__name__} does not have (its fields:"
                    f" {', '.join(fields)})"
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
            problems = run.problems()
            if problems:
                errored = run.error is not None or (turn is not None and turn.error is not None)
                problem = ET.SubElement(
                    case, "error" if errored else "failure", message=problems[0]
                )
                details = list(problems)
                if turn is not None and turn.reply is not None:
                    details.append(f"reply: {turn.reply}")
                for trace in (run.trace, turn.trace if turn is not None else None):
                    if trace is not None:
                        details.append(trace)
                problem.text = "\n".join(details)
            if run.verdicts:
                ET.SubElement(case, "system-out").text = "\n".join(
                    f"judge {'PASS' if v.passed else 'FAIL'} {v.criterion!r}: {v.reason}"
                    for v in run.verdicts
                )
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
