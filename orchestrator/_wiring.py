"""Wiring experts at construction: prompts rendered, models wrapped, budgets checked.

Everything here runs once, when an `Orchestrator` is built, so that a bad prompt, a prompt
over its token allowance or an unknown prompt name fails at start-up rather than mid-turn.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from frontdesk.errors import InputTooLarge
from frontdesk.experts import Category, ExpertCall
from frontdesk.experts.memory import MemoryExpert
from frontdesk.experts.providers import (
    CalibratedModel,
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
)
from frontdesk.experts.providers.base import json_schema_of, settings_of
from frontdesk.experts.request import RequestExpert, extraction_type
from frontdesk.experts.request import prompt_variables as request_variables
from frontdesk.experts.response import ResponseExpert
from frontdesk.experts.review import ReviewExpert
from frontdesk.experts.triage import TriageExpert, triage_output_type
from frontdesk.experts.triage import prompt_variables as triage_variables
from frontdesk.experts.triage_fit import TriageShortlist
from frontdesk.orchestrator.config import (
    EXPERTS,
    ExpertSettings,
    ModelChoice,
    offline_by_default,
    resolve_models,
)
from frontdesk.orchestrator.profile import Profile
from frontdesk.orchestrator.resolution import check_variants
from frontdesk.orchestrator.review import Review
from frontdesk.prompts import Prompt, RenderedPrompt, load_prompt, parse_prompt
from frontdesk.threads.budget import Budget, budget_for, fit_to_window, question_tokens
from frontdesk.threads.tokens import CalibratedCounter, TokenCounter

Experts = tuple[TriageExpert, Mapping[str, RequestExpert], ResponseExpert]
"""The triage expert, the request expert of each category, and the response expert."""


@dataclass(frozen=True, kw_only=True)
class Wiring:
    """What the experts are built from."""

    categories: Sequence[Category]
    models: Mapping[str, Model]
    settings: ExpertSettings
    prompts_dir: Path | None
    business_name: str
    counter: TokenCounter

    def prompt(self, name: str) -> Prompt:
        """A prompt by name: `prompts_dir` first, then the built-in."""
        return load_prompt(name, directory=self.prompts_dir)

    def call(self, expert: str, prompt: RenderedPrompt) -> ExpertCall:
        """One expert's model (recorded for the audit, calibrating the counter) and prompt."""
        return ExpertCall(
            expert=expert,
            model=CalibratedModel(self.models[expert], calibrate=self.calibrate),
            prompt=prompt,
            settings=self.settings.for_expert(expert),
        )

    def request_prompt(self, category: Category) -> Prompt:
        """The category's own request prompt (a name or a text), else the default."""
        custom = category.request_prompt
        if custom is None:
            return self.prompt("request")
        if "\n" not in custom and " " not in custom:
            return self.prompt(custom)
        if custom.startswith("---\n"):
            return parse_prompt(custom, source=f"category {category.name}")
        front = f"---\nname: request.{category.name.lower()}\nversion: custom\n---\n"
        return parse_prompt(front + custom, source=f"category {category.name}")

    def build(self) -> Experts:
        """Every expert, with its prompt rendered now."""
        listed = list(self.categories)
        triage = self.triage()
        requests = {}
        for category in listed:
            if category.request is None:
                continue
            extraction_type(category.request)
            rendered = self.request_prompt(category).render(**request_variables(category))
            requests[category.name] = RequestExpert(
                category=category, call=self.call("request", rendered)
            )
        return triage, requests, self.response()

    def triage(
        self, prompt: str = "triage", budgets: Mapping[str, Budget] | None = None
    ) -> TriageExpert:
        """The triage expert with the prompt `prompt` (a variant's, or the default); given
        the budgets, with its shortlist (`experts/triage_fit.py`: one message's prompt when
        every example does not fit the allowance, or a router's candidates)."""
        listed = list(self.categories)
        template = self.prompt(prompt)
        shortlist = None
        if budgets is not None:
            shortlist = TriageShortlist(
                prompt=template,
                categories=listed,
                allowance=budget_for("triage", budgets).system,
                count=self.counter.count,
            )
        return TriageExpert(
            call=self.call("triage", template.render(**triage_variables(listed))),
            output_type=triage_output_type(listed),
            shortlist=shortlist,
        )

    def response(self, prompt: str = "response") -> ResponseExpert:
        """The response expert with the prompt `prompt` (a variant's, or the default)."""
        return ResponseExpert(
            call=self.call(
                "response",
                self.prompt(prompt).render(
                    # `shop_name` too: a prompts_dir file written before the rename still renders.
                    business_name=self.business_name,
                    shop_name=self.business_name,
                ),
            )
        )

    def variants(
        self,
        experts: Experts,
        variants: Mapping[str, Mapping[str, str]],
        budgets: Mapping[str, Budget] | None = None,
    ) -> dict[str, tuple[TriageExpert, ResponseExpert]]:
        """Variant name -> its triage and response experts (`Orchestrator(variants=...)`):
        the named prompt for an expert with variants, the default experts' otherwise."""
        triage, _, response = experts
        names = next(iter(variants.values()), {})
        built = {}
        for name in names:
            t = variants["triage"][name] if "triage" in variants else None
            r = variants["response"][name] if "response" in variants else None
            built[name] = (
                triage if t is None else self.triage(t, budgets),
                response if r is None else self.response(r),
            )
        return built

    def memory_expert(self) -> MemoryExpert:
        """The memory expert with its versioned prompt (run after replies)."""
        return MemoryExpert(call=self.call("memory", self.prompt("memory").render()))

    def review_expert(self) -> ReviewExpert:
        """The review expert with its versioned prompt (`Orchestrator(review=True)`)."""
        return ReviewExpert(call=self.call("review", self.prompt("review").render()))

    def check_budgets(self, experts: Experts, budgets: Mapping[str, Budget]) -> None:
        """Refuse a system prompt over its expert's allowance (`ConfigError`)."""
        triage, requests, response = experts
        calls = [response.call, *(r.call for r in requests.values())]
        if triage.shortlist is None or triage.shortlist.whole_fits:
            calls.append(triage.call)  # Else each message's prompt is fitted to the allowance.
        summariser = self.prompt("summariser").render()
        sized = [(c.expert, c.prompt.text) for c in calls] + [("summariser", summariser.text)]
        sized.append(("memory", self.prompt("memory").render().text))
        for expert, text in sized:
            budget_for(expert, budgets).check_system(self.counter.count(text), expert=expert)

    def effective(self, expert: str) -> ModelSettings:
        """An expert's settings over its model spec's (`ModelSettings.over`)."""
        return self.settings.for_expert(expert).over(settings_of(self.models[expert]))

    def fit_budgets(self, experts: Experts, budgets: Mapping[str, Budget]) -> dict[str, Budget]:
        """The budgets, each cut to its model's `context_tokens` where one is set
        (`threads.budget.fit_to_window`); the others as given.

        Raises:
            ConfigError: an expert whose system prompt and answer do not fit its window.
        """
        fitted = dict(budgets)
        for expert, system in self._system_tokens(experts).items():
            window = self.effective(expert).context_tokens
            if window is None:
                continue
            budget = budget_for(expert, budgets)
            answer = min(budget.answer, self.effective(expert).max_tokens)
            fitted[expert] = fit_to_window(
                dataclasses.replace(budget, answer=answer),
                context_tokens=window,
                system_tokens=system,
                expert=expert,
            )
        return fitted

    def _system_tokens(self, experts: Experts) -> dict[str, int]:
        """Each expert's fixed input: its rendered prompt, and the output schema it sends."""
        triage, requests, response = experts
        count = self.counter.count

        def schema(output_type: type[BaseModel]) -> int:
            return count(json.dumps(json_schema_of(output_type), separators=(",", ":")))

        sized = {
            "triage": count(triage.call.prompt.text) + schema(triage.output_type),
            "response": count(response.call.prompt.text),
            "summariser": count(self.prompt("summariser").render().text),
            "memory": count(self.prompt("memory").render().text),
        }
        if requests:
            sized["request"] = max(
                count(r.call.prompt.text) + schema(extraction_type(r.category.request))
                for r in requests.values()
                if r.category.request is not None
            )
        return sized

    def calibrate(self, request: ModelRequest, response: ModelResponse) -> None:
        """Learn the estimate's error from a real provider's exact input token count."""
        counter = self.counter
        exact = response.usage.total_input_tokens
        if not isinstance(counter, CalibratedCounter) or exact <= 0:
            return
        if not response.model.startswith(("anthropic:", "openai:")):
            return  # Doubles and the offline stand-in report no real count to learn from.
        estimated = counter.base.count(request.system) + counter.base.count_messages(
            request.messages
        )
        if request.output_type is not None:
            estimated += counter.base.count(json.dumps(request.output_type.model_json_schema()))
        # A count far from any tokenizer's (a proxy that reports nothing useful) would teach
        # the counter nonsense; such figures are kept in the audit log, not learnt from.
        if 0.25 <= exact / max(estimated, 1) <= 4:
            counter.observe(response.model, estimated, exact)


def counter_for(counter: TokenCounter, model_name: str) -> TokenCounter:
    """The counter for one model (calibrated per model when it can be)."""
    if isinstance(counter, CalibratedCounter):
        return counter.for_model(model_name)
    return counter


def check_question(
    text: str, counters: Mapping[str, TokenCounter], budgets: Mapping[str, Budget]
) -> None:
    """Refuse before storing a question no expert's budget can hold (no provider 413).

    Counts exactly as `Budget.fit` will when the turn builds each expert's view: with that
    expert's calibrated counter and the question framed as one user turn. A message that
    passes here is therefore never refused later with `QuestionOverBudget` (unless a
    provider's reported usage raises the calibration in between).

    Raises:
        InputTooLarge: naming the expert and its allowance.
    """
    for expert in ("triage", "request", "response"):
        allowance = budget_for(expert, budgets).question
        tokens = question_tokens(counters[expert], text)
        if tokens > allowance:
            raise InputTooLarge(
                f"the message is about {tokens:,} tokens; the {expert} expert's question"
                f" allowance is {allowance:,} tokens; send a shorter message"
                " (Orchestrator(budgets=...) changes the allowance)"
            )


@dataclass(frozen=True, kw_only=True)
class Wired:
    """One profile, wired: its models, experts and token counter (built once, at
    construction; the store-bound parts are built when the orchestrator opens)."""

    profile: Profile
    models: Mapping[str, Model]
    owned: Sequence[Model]
    """Models built here from spec strings: their HTTP clients are closed with the
    orchestrator (`Model` instances passed in belong to the caller)."""
    offline_by_default: bool
    experts: Experts
    memory_expert: MemoryExpert
    review: Review | None
    """The review expert and its rules (`Profile.review`), or `None`."""
    counter: TokenCounter
    business_name: str
    prompts_dir: Path | None
    variants: Mapping[str, tuple[TriageExpert, ResponseExpert]] = field(default_factory=dict)
    """Prompt variant name -> its triage and response experts (`Profile.variants`)."""
    budgets: Mapping[str, Budget]
    """The profile's budgets, each cut to its model's `context_tokens` where one is set."""
    one_at_a_time: bool = False
    """The triage or request model's server answers one request at a time
    (`concurrency=1`): no speculative call beside triage."""

    def counter_for(self, expert: str) -> TokenCounter:
        """The token counter for one expert's model."""
        made = self.counters.get(expert)
        return made if made is not None else counter_for(self.counter, self.models[expert].name)

    @functools.cached_property
    def counters(self) -> Mapping[str, TokenCounter]:
        """Expert -> its model's counter, made once (each follows later calibration)."""
        return {e: counter_for(self.counter, self.models[e].name) for e in EXPERTS}

    def check_question(self, text: str) -> None:
        """Refuse up front a question some expert could not be sent (`InputTooLarge`)."""
        check_question(text, self.counters, self.budgets)


def wire(profile: Profile) -> Wired:
    """Resolve a profile's models, render its prompts, check its budgets.

    Raises:
        ConfigError: a model, prompt or budget that cannot work.
    """
    choice = profile.model
    models = resolve_models(choice)
    owned = {id(m): m for m in models.values() if not _passed_in(m, choice)}
    counter = profile.token_counter or CalibratedCounter()
    prompts_dir = Path(profile.prompts) if profile.prompts is not None else None
    wiring = Wiring(
        categories=list(profile.categories),
        models=models,
        settings=profile.settings,
        prompts_dir=prompts_dir,
        business_name=profile.business_name or "the business",
        counter=counter,
    )
    experts = wiring.build()
    # A model's `context_tokens` (its spec, or the expert's settings) cuts its budget.
    budgets = wiring.fit_budgets(experts, profile.budgets or {})
    experts = (wiring.triage(budgets=budgets), experts[1], experts[2])
    wiring.check_budgets(experts, budgets)
    return Wired(
        variants=wiring.variants(experts, check_variants(profile.variants), budgets),
        budgets=budgets,
        one_at_a_time=any(wiring.effective(e).concurrency == 1 for e in ("triage", "request")),
        profile=profile,
        models=models,
        owned=list(owned.values()),
        offline_by_default=offline_by_default(choice),
        experts=experts,
        memory_expert=wiring.memory_expert(),
        review=Review(
            expert=wiring.review_expert(),
            rules=tuple(profile.review_rules),
            fallback=profile.review_fallback,
        )
        if profile.review
        else None,
        counter=counter,
        business_name=wiring.business_name,
        prompts_dir=prompts_dir,
    )


def _passed_in(model: object, choice: ModelChoice) -> bool:
    """Whether `model` is an instance the caller passed (rather than one built from a spec)."""
    if isinstance(choice, Mapping):
        return any(model is c for c in choice.values())
    return model is choice
