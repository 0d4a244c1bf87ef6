"""Which model each expert uses, and the settings a deployment may change."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import structlog

from frontdesk.errors import ConfigError
from frontdesk.experts.category import Category
from frontdesk.experts.providers import Model, ModelSettings

EXPERTS = ("triage", "request", "response", "summariser")
"""The experts a model map must cover (by name or `default`)."""
log = structlog.get_logger("frontdesk.orchestrator")

MEMORY = "memory"
SIMULATION = ("user", "judge")
"""The conversation tests' simulated customer and judge (`frontdesk test`, `simulate:`),
given in the model map only by name; no turn calls them."""
"""The memory expert: a model map may name it; else `default`, else the summariser's model."""
REVIEW = "review"
"""The review expert (`Orchestrator(review=True)`): a model map may name it; else
`default`, else the response expert's model."""

ModelSpec = str | Model | list[str | Model] | tuple[str | Model, ...]
"""A spec string, a `Model`, or a list tried in order (e.g. `["anthropic:...", "offline"]`:
the next one answers when the previous is out of service after its retries)."""
ModelChoice = ModelSpec | Mapping[str, ModelSpec] | None


def default_model_choice() -> dict[str, str]:
    """The models used when none is given: a provider whose key is set, else `offline`.

    The triage expert gets a small fast model; the others a stronger one.
    """
    if os.environ.get("ANTHROPIC_API_KEY"):
        return {"triage": "anthropic:claude-haiku-4-5", "default": "anthropic:claude-sonnet-4-5"}
    if os.environ.get("OPENAI_API_KEY"):
        return {"triage": "openai:gpt-4.1-nano", "default": "openai:gpt-4.1-mini"}
    return {"default": "offline"}


def resolve_models(choice: ModelChoice) -> dict[str, Model]:
    """One `Model` per expert from a spec, a `Model`, or a map expert -> spec or Model.

    Raises:
        ConfigError: an unknown expert name in the map, or an expert left without a model.
    """
    if choice is None:
        choice = default_model_choice()
    if not isinstance(choice, Mapping):
        model = _model(choice)
        return dict.fromkeys((*EXPERTS, MEMORY, REVIEW), model)
    unknown = sorted(set(choice) - {*EXPERTS, MEMORY, REVIEW, *SIMULATION, "default"})
    if unknown:
        raise ConfigError(
            f"model map names unknown experts {unknown};"
            f" use {', '.join((*EXPERTS, MEMORY, REVIEW, *SIMULATION))} or 'default'"
        )
    missing = [e for e in EXPERTS if e not in choice and "default" not in choice]
    if missing:
        raise ConfigError(f"model map has no model for {missing}; add them or a 'default' entry")
    cache: dict[int, Model] = {}
    models: dict[str, Model] = {}
    for expert in EXPERTS:
        spec = choice.get(expert, choice.get("default"))
        assert spec is not None
        key = hash(spec) if isinstance(spec, str) else id(spec)
        if key not in cache:
            cache[key] = _model(spec)
        models[expert] = cache[key]
    spec = choice.get(MEMORY, choice.get("default"))
    if spec is None:  # A four-expert map: the memory expert shares the summariser's model.
        models[MEMORY] = models["summariser"]
    else:
        key = hash(spec) if isinstance(spec, str) else id(spec)
        models[MEMORY] = cache[key] if key in cache else _model(spec)
    spec = choice.get(REVIEW, choice.get("default"))
    if spec is None:  # No review model named: the response expert's model reviews.
        models[REVIEW] = models["response"]
    else:
        key = hash(spec) if isinstance(spec, str) else id(spec)
        models[REVIEW] = cache[key] if key in cache else _model(spec)
    for expert in SIMULATION:  # Only when named: a turn never calls them.
        spec = choice.get(expert)
        if spec is not None:
            key = hash(spec) if isinstance(spec, str) else id(spec)
            models[expert] = cache[key] if key in cache else _model(spec)
    return models


_warned: list[bool] = []
_without_examples: set[str] = set()


def warn_without_examples(categories: Iterable[Category]) -> None:
    """Say (once per category, when an app is built) that a category has no examples:
    triage then routes to it on its description alone, which models do badly."""
    for category in categories:
        if not category.examples and category.name not in _without_examples:
            _without_examples.add(category.name)
            log.warning(
                "category.no_examples",
                category=category.name,
                detail="this category has no examples; triage routes to it on its description"
                " alone; add a few typical customer messages (Category(examples=[...]))",
            )


def warn_offline_once() -> None:
    """Say (once per process) that customers get the offline stand-in's canned answers:
    called when an orchestrator left to `offline_by_default` opens (building one, e.g.
    for `frontdesk serve`'s checks, says nothing)."""
    if not _warned:
        _warned.append(True)
        log.warning(
            "models.offline_fallback",
            detail="no model given and no ANTHROPIC_API_KEY or OPENAI_API_KEY set: every expert"
            " uses the offline stand-in (deterministic, not a language model); set a key or"
            " pass model='offline' to choose it",
        )


def offline_by_default(choice: ModelChoice) -> bool:
    """Whether `choice` leaves the models to the defaults and the defaults are the offline
    stand-in (no key set): what `frontdesk serve` refuses unless told `--model offline`."""
    return choice is None and default_model_choice() == {"default": "offline"}


def _model(spec: ModelSpec) -> Model:
    """One model from a spec, a Model, or a fallback list."""
    from frontdesk.experts.providers import FallbackModel, model_from_spec

    if isinstance(spec, list | tuple):
        if len(spec) < 2:
            raise ConfigError("a fallback list needs at least two models, e.g. [spec, 'offline']")
        primary, *rest = (model_from_spec(s) for s in spec)
        return FallbackModel(primary, *rest)
    return model_from_spec(spec)


@dataclass(frozen=True, kw_only=True)
class ExpertSettings:
    """Per-expert call settings; triage needs few output tokens, the request expert more."""

    triage: ModelSettings = field(default_factory=lambda: ModelSettings(max_tokens=256))
    request: ModelSettings = field(default_factory=lambda: ModelSettings(max_tokens=1024))
    response: ModelSettings = field(default_factory=lambda: ModelSettings(max_tokens=512))
    summariser: ModelSettings = field(default_factory=lambda: ModelSettings(max_tokens=1024))
    memory: ModelSettings = field(default_factory=lambda: ModelSettings(max_tokens=512))
    review: ModelSettings = field(default_factory=lambda: ModelSettings(max_tokens=256))

    def for_expert(self, expert: str) -> ModelSettings:
        """The settings of one expert."""
        settings: ModelSettings = getattr(self, expert)
        return settings
