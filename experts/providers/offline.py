"""`OfflineModel`: a deterministic stand-in so the demo and a first run need no key or network.

It works purely from the `ModelRequest` (see docs/CONTRACTS.md), and labels everything it
writes with `[offline]`:

- triage: the category whose description and examples share the most (rarer) words with
  the last user message; `HUMAN` when the user asks for a person; `OTHER` when nothing fits.
- request extraction: fills the category's request model by field type from the user turns
  (choices most recently named, numbers next to the field's noun, 4+ digit ids); asks for
  whatever required field is still missing.
- response: rephrases the handler's instruction (the trailing assistant message).
- summariser: an extractive summary keeping names, numbers and the user's requests.
- memory: simple stable facts the user states ("I prefer Hindi", "I'm allergic to
  peanuts", "I live in Pune"); the response then names the remembered facts that share
  words with the user's message.
"""

from __future__ import annotations

import datetime as dt
import enum
import re
import time
import types
import typing
from collections.abc import AsyncIterator, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ValidationError

from frontdesk.errors import OutputValidationError
from frontdesk.experts.providers import _offline_values as values
from frontdesk.experts.providers._offline_routing import (
    CONFIDENT,
    OUT_OF_SCOPE,
    Index,
    answers_question,
    build_index,
    wants_person,
)
from frontdesk.experts.providers.base import (
    Message,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    Usage,
    json_schema_of,
)
from frontdesk.experts.providers.function import report_call, stream_reply
from frontdesk.labels import (
    CUSTOMER_MEMORY_END,
    CUSTOMER_MEMORY_LABEL,
    DOCUMENTS_LABEL,
    VERIFIED_MEMORY_END,
    VERIFIED_MEMORY_LABEL,
)

LABEL = "[offline]"
"""Starts every text the stand-in writes, so nobody mistakes it for a real model."""
SUMMARY_LABEL = "[offline summary]"

_STOP = frozenset(
    "a an and are as at be but by can could do does for from have i i'd i'm in is it its"
    " me my of on or our please so that the this to was we what when where which will with"
    " would you your yours it's im id like want need get just also some any hi hello thanks".split()
)
_BACK_TO_FIRST = re.compile(r"\b(first|original|initial|earlier)\b|\bgo(ing)?\s+back\b", re.I)
_ONES = [
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
    " fifteen sixteen seventeen eighteen nineteen"
][0].split()
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50}


def _number_words() -> dict[str, int]:
    words: dict[str, int] = {"a": 1, "an": 1, "a single": 1, "a couple of": 2, "a dozen": 12}
    words.update({w: i for i, w in enumerate(_ONES) if i > 0})
    for tens, value in _TENS.items():
        words[tens] = value
        if value < 50:
            for i in range(1, 10):
                words[f"{tens}-{_ONES[i]}"] = value + i
                words[f"{tens} {_ONES[i]}"] = value + i
    return words


_NUMBER_WORDS = _number_words()
_NUMBER_ALT = "|".join(
    re.escape(w).replace(r"\ ", r"\s+") for w in sorted(_NUMBER_WORDS, key=len, reverse=True)
)


def _stem(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix) and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


def _tokens(text: str) -> set[str]:
    return set(_token_list(text))


def _token_list(text: str) -> list[str]:
    words = re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower())
    return [_stem(w.removesuffix("'s")) for w in words if w not in _STOP]


def _estimated_usage(request: ModelRequest, raw: Any) -> Usage:
    """Roughly what a real model would bill (4 characters a token), so figures stay readable.

    The stand-in has no tokenizer; these are estimates, and the audit log names the model
    `offline`, so nobody mistakes them for provider-reported usage.
    """
    sent = len(request.system) + sum(len(m["content"]) + 16 for m in request.messages)
    if request.output_type is not None:
        sent += len(str(json_schema_of(request.output_type)))
    return Usage(input_tokens=sent // 4 + 1, output_tokens=len(str(raw)) // 4 + 1)


class OfflineModel:
    """The `offline` model: deterministic, no network, clearly labelled as a stand-in.

    Args:
        today: The day relative dates ("tomorrow", "next Friday") count from; the real
            date when not given (an evaluation on a data set passes the set's own day).
        out_of_scope: Triage answers `OTHER` when the nearest examples share less than
            this part of the message's words (weighted by rarity); 0 never does.
    """

    def __init__(self, *, today: dt.date | None = None, out_of_scope: float = OUT_OF_SCOPE) -> None:
        self.today = today
        self.out_of_scope = out_of_scope

    def _today(self) -> dt.date:
        return self.today or dt.date.today()

    @property
    def name(self) -> str:
        """Always `offline`."""
        return "offline"

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Answer `request` from its own contents (see the module docstring)."""
        started = time.perf_counter()
        response = self._respond(request, started)
        report_call(request, self.name, 1, started, response, None)
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """The same answer as `request`, its text handed out a few words at a time."""
        started = time.perf_counter()
        response = self._respond(request, started)
        async for event in stream_reply(request, self.name, started, response):
            yield event

    def _respond(self, request: ModelRequest, started: float) -> ModelResponse:
        try:
            output = self.answer(request)
        except Exception as exc:
            report_call(request, self.name, 1, started, None, exc)
            raise
        raw = output.model_dump(mode="json") if isinstance(output, BaseModel) else output
        return ModelResponse(
            output=output,
            model=self.name,
            stop_reason="end_turn",
            raw=raw,
            usage=_estimated_usage(request, raw),
        )

    def answer(self, request: ModelRequest) -> Any:
        """The output for `request`: text, or an instance of its `output_type`."""
        output_type = request.output_type
        if output_type is None:
            if request.expert == "summariser":
                # The last user turn is the summariser's own request ("Write the updated
                # summary now..."), not a turn of the conversation: never summarised.
                return summarise(_without_request(request.messages))
            if request.messages and request.messages[-1]["role"] == "assistant":
                reply = reply_from_instruction(request.messages[-1]["content"])
                return reply + remembered_note(request) + reference_note(request)
            return (
                f"{LABEL} I am the offline stand-in model, so I can only follow the assistant's"
                " instructions; set an API key for a real model to get free-form answers."
            )
        user_texts = [_said(m["content"]) for m in request.messages if m["role"] == "user"]
        if request.expert == "review" and "approved" in output_type.model_fields:
            return output_type.model_validate({"approved": True, "note": ""})
        if request.expert == "memory" and "facts" in output_type.model_fields:
            return output_type.model_validate({"facts": facts_in(" ".join(user_texts))})
        schema = json_schema_of(output_type)
        if "x-frontdesk-categories" in schema or "category" in output_type.model_fields:
            thread = [m for m in request.messages if m["role"] in ("user", "assistant")]
            latest = user_texts[-1] if user_texts else ""
            return triage(
                output_type, schema, latest, thread=thread, out_of_scope=self.out_of_scope
            )
        request_model = _request_model_of(output_type)
        if request_model is not None:
            return extract_wrapped(output_type, request_model, user_texts, today=self._today())
        data, _missing = extract_fields(output_type, user_texts, today=self._today())
        try:
            return output_type.model_validate(data)
        except ValidationError as exc:
            raise OutputValidationError(
                f"the offline model cannot fill {output_type.__name__} from the thread;"
                " use a real model or a FunctionModel for this expert",
                model=self.name,
            ) from exc


_LANGUAGES = (
    "english hindi marathi tamil telugu bengali gujarati punjabi urdu kannada malayalam"
    " spanish french german italian portuguese dutch polish arabic chinese japanese welsh"
).split()
_PLACE = r"([A-Z][\w'-]+(?:\s+[A-Z][\w'-]+)?)"
_FACTS: list[tuple[re.Pattern[str], str, str | None]] = [
    (
        re.compile(
            r"\bI(?:'m| am) (?:severely |very )?allergic to ([\w -]+?)(?=[.,!?;]|\band\b|$)", re.I
        ),
        "Allergic to {}",
        None,
    ),
    (
        re.compile(r"\bI(?:'m| am) (vegetarian|vegan|pescatarian|gluten[- ]free)\b", re.I),
        "Is {}",
        "diet",
    ),
    (re.compile(r"\bI (?:now )?live in " + _PLACE), "Lives in {}", "home_city"),
    (re.compile(r"\bI(?:'ve| have)? (?:just )?moved to " + _PLACE), "Lives in {}", "home_city"),
    (re.compile(r"\bI(?:'m| am) (?:based|living) in " + _PLACE), "Lives in {}", "home_city"),
    (re.compile(r"\bmy name is ([A-Z][\w'-]+)"), "Is called {}", "name"),
]
_LANGUAGE = re.compile(
    r"\b(?:I (?:would |'d )?prefer|I speak|(?:reply|replies|answer|write|talk) (?:to me )?in)"
    r"\s+(?:replies in |to speak |speaking |to talk in )?(\w+)",
    re.I,
)


def facts_in(text: str) -> list[dict[str, str | None]]:
    """Simple stable facts a message states ("I prefer Hindi", "I'm allergic to peanuts",
    "I live in Pune", "I moved to Mumbai"), as the memory expert's structured answer."""
    found: list[dict[str, str | None]] = []
    language = _LANGUAGE.search(text)
    if language and language.group(1).lower() in _LANGUAGES:
        found.append(
            {"text": f"Prefers replies in {language.group(1).capitalize()}", "key": "language"}
        )
    for pattern, template, key in _FACTS:
        for match in pattern.finditer(text):
            value = " ".join(match.group(1).split()).strip(" -")
            if value:
                fact_key = key or "allergy_" + "_".join(_tokens(value))
                found.append({"text": template.format(value), "key": fact_key})
    return found


def remembered_note(request: ModelRequest) -> str:
    """A line naming the remembered facts that share words with the user's message (so the
    demo shows a fact from one conversation used in the next); empty when none do. Past
    conversations are not facts: never named."""
    facts = [
        line[2:]
        for line in _memory_lines(request.messages)
        if line.startswith("- ") and not line.startswith("- An earlier conversation")
    ]
    user = [_said(m["content"]) for m in request.messages if m["role"] == "user"]
    if not facts or not user:
        return ""
    words = _tokens(user[-1])
    relevant = [f for f in facts if _tokens(f) & words]
    if not relevant:
        return ""
    return " (I remember: " + "; ".join(f.rstrip(".") for f in relevant) + ".)"


def _said(content: str) -> str:
    """A user turn's own text, without the memory blocks before the question and the
    passages of documents after it."""
    for end in (CUSTOMER_MEMORY_END, VERIFIED_MEMORY_END):
        if end in content:  # A genuine delimiter (customer text has them neutralised).
            content = content.rsplit(end, 1)[1].lstrip("\n")
    return content.split(f"\n\n{DOCUMENTS_LABEL}", 1)[0]


def _memory_lines(messages: Sequence[Message]) -> list[str]:
    """The lines inside the memory blocks of the last user turn."""
    users = [m["content"] for m in messages if m["role"] == "user"]
    if not users:
        return []
    lines: list[str] = []
    inside = False
    for line in users[-1].splitlines():
        if line in (CUSTOMER_MEMORY_LABEL, VERIFIED_MEMORY_LABEL):
            inside = True
        elif line in (CUSTOMER_MEMORY_END, VERIFIED_MEMORY_END):
            inside = False
        elif inside:
            lines.append(line)
    return lines


def _without_request(messages: Sequence[Message]) -> list[Message]:
    """The summariser's messages without its closing request (its last user turn)."""
    if messages and messages[-1]["role"] == "user":
        return list(messages[:-1])
    return list(messages)


def reference_note(request: ModelRequest) -> str:
    """The best passage sent, quoted (its first two sentences) with where it is from, so
    the demo answers a policy question from the help pages; empty when none was sent."""
    if not request.passages:
        return ""
    best = request.passages[0]
    sentences = _SENTENCE.split(" ".join(best.text.split()))
    quoted = " ".join(sentences[:2])
    return f" {LABEL} From our help pages ({best.source}, {best.title}): {quoted}"


def triage(
    output_type: type[BaseModel],
    schema: dict[str, Any],
    text: str,
    *,
    thread: Sequence[Message] = (),
    out_of_scope: float = OUT_OF_SCOPE,
) -> BaseModel:
    """Route `text` to the category of its nearest examples (BM25), `OTHER` when they share
    less than `out_of_scope` of its words' weight. `thread`, the messages `text` ends,
    keeps an answer to the assistant's question in the category that asked, and lets a
    message that goes on with the previous one's topic stay in it on less evidence."""
    names = [
        str(_choice_value(v)) for v in _choices(output_type.model_fields["category"].annotation)
    ]
    if "HUMAN" in names and wants_person(text):
        return output_type.model_validate(
            {"category": "HUMAN", "reason": f"{LABEL} the user asks for a person"}
        )
    index = _index_of(output_type, tuple(names))
    route = index.route(_token_list(text))
    asked = _asking_category(index, thread, out_of_scope) if thread else None
    if asked is not None and (
        answers_question(thread) == "value"
        or route is None
        or route.share < CONFIDENT
        or route.category in (asked, "OTHER")
    ):
        return output_type.model_validate(
            {"category": asked, "reason": f"{LABEL} answers the question {asked} asked"}
        )
    weak = route is None or route.share < out_of_scope
    if weak and route is not None and route.category == _previous(index, thread, out_of_scope):
        weak = False  # The same topic as the message before: no need to say it all again.
    if route is None or weak or route.category not in names:
        fallback = "OTHER" if "OTHER" in names else names[0]
        return output_type.model_validate(
            {"category": fallback, "reason": f"{LABEL} no category matched the message"}
        )
    return output_type.model_validate(
        {
            "category": route.category,
            "reason": f"{LABEL} nearest example shares: {', '.join(route.words)}",
        }
    )


def _previous(index: Index, thread: Sequence[Message], out_of_scope: float) -> str | None:
    """The topic the user's messages before the latest one were on, if any: each message
    is on the topic it matches clearly, or stays on the one before when it matches that."""
    topic: str | None = None
    for message in [m for m in thread if m["role"] == "user"][:-1]:
        route = index.route(_token_list(_said(message["content"])))
        if route is None or route.category == "OTHER":
            topic = None
        elif route.share >= out_of_scope or route.category == topic:
            topic = route.category
        else:
            topic = None
    return topic


def _asking_category(index: Index, thread: Sequence[Message], out_of_scope: float) -> str | None:
    """The category the conversation was in when the assistant asked the question the
    latest message answers (followed back through earlier answers), if any."""
    end = len(thread)
    while end >= 3 and answers_question(thread[:end]):
        end -= 2
        text = _said(thread[end - 1]["content"])
        if wants_person(text):
            return None
        route = index.route(_token_list(text))
        if route is not None and route.share >= out_of_scope and route.category != "OTHER":
            return route.category if route.category != "HUMAN" else None
    return None


@lru_cache(maxsize=64)
def _index_of(output_type: type[BaseModel], names: tuple[str, ...]) -> Index:
    """The BM25 index of one triage output type (built once: the app's categories)."""
    schema = json_schema_of(output_type)
    return build_index(schema.get("x-frontdesk-categories") or {}, names, _token_list)


def extract_wrapped(
    output_type: type[BaseModel],
    request_model: type[BaseModel],
    user_texts: Sequence[str],
    *,
    today: dt.date | None = None,
) -> BaseModel:
    """Fill the `<Request>Extraction` wrapper: the request, or `need_more_info`."""
    data, missing = extract_fields(request_model, user_texts, today=today)
    if not missing:
        try:
            request = request_model.model_validate(data)
            return output_type.model_validate({"request": request, "need_more_info": None})
        except ValidationError:
            missing = [n for n, f in request_model.model_fields.items() if f.is_required()]
    question = f"{LABEL} To go ahead I need " + _join(
        [_describe(n, request_model.model_fields[n].annotation) for n in missing]
    )
    return output_type.model_validate(
        {
            "request": None,
            "need_more_info": {"missing": missing, "question": question + ". Could you tell me?"},
        }
    )


def extract_fields(
    model: type[BaseModel], user_texts: Sequence[str], *, today: dt.date | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Values found in the user turns for `model`'s fields, and the required ones missing.

    Dates, times and sums of money are shared out among the fields of their kind (one
    mention per field: `date_from` the one after "from"); digit ids too, so two `*number*`
    fields never get the same digits."""
    data: dict[str, Any] = {}
    kinds: dict[str, list[str]] = {}
    for name, info in model.model_fields.items():
        kind = _kind_of(name, info.annotation)
        if kind:
            kinds.setdefault(kind, []).append(name)
            continue
        value = _find(name, info.annotation, user_texts)
        if value is not None:
            data[name] = value
    day = today or dt.date.today()
    finders = {
        "date": lambda text: values.dates_in(text, day),
        "time": values.times_in,
        "amount": values.amounts_in,
    }
    for kind, names in kinds.items():
        if kind == "digits":
            data.update(_digit_ids(names, user_texts))
            continue
        for text in user_texts:  # A later turn's value replaces an earlier one.
            data.update(values.assign(names, finders[kind](text)))
    # Drop values the model rejects (e.g. out of range), so they are asked for again.
    for _ in range(len(data) + 1):
        try:
            model.model_validate(data)
            break
        except ValidationError as exc:
            bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"] and e["type"] != "missing"}
            if not bad & data.keys():
                break
            for key in bad:
                data.pop(key, None)
    missing = [n for n, f in model.model_fields.items() if f.is_required() and n not in data]
    return data, missing


_MONEY = re.compile(r"amount|price|cost|total|fee|refund|sum|balance|payment|charge|budget")
_DIGIT_ID = re.compile(r"number|(^|_)(id|no|ref|reference|code|pin|phone|account)($|_)")


def _kind_of(name: str, annotation: Any) -> str:
    """Which shared-out kind a field is: date, time, amount, digits, or "" (on its own)."""
    annotation = _unwrap_optional(annotation)
    if annotation is dt.date:
        return "date"
    if annotation is dt.time:
        return "time"
    if annotation is Decimal or (annotation in (int, float) and _MONEY.search(name.lower())):
        return "amount"
    if annotation is str and _DIGIT_ID.search(name.lower()):
        return "digits"
    return ""


def _digit_ids(names: Sequence[str], texts: Sequence[str]) -> dict[str, str]:
    """Runs of 4+ digits for id fields: the run right after a field's own words ("PIN
    4321", "phone number 0123 456") first, then the latest run no other field took."""
    found: dict[str, str] = {}
    taken: set[str] = set()
    for name in names:
        words = [w for w in name.lower().split("_") if w not in ("number", "no", "the", "my")]
        if not words:
            continue
        label = r"[\s_-]*".join(re.escape(w) for w in words)
        pattern = re.compile(
            rf"\b{label}\w*(?:\s+(?:number|no\.?|is|was|:|#))*\s*#?\s*(\d[\d -]{{2,}}\d)", re.I
        )
        for text in texts:
            for match in pattern.finditer(text):
                digits = re.sub(r"\D", "", match.group(1))
                if len(digits) >= 4 and digits not in taken:
                    found[name] = digits
        if name in found:
            taken.add(found[name])
    for name in names:
        if name in found:
            continue
        for text in reversed(texts):
            runs = [r for r in re.findall(r"(?<![\d.])\d{4,}(?![\d.])", text) if r not in taken]
            if runs:
                found[name] = runs[-1]
                taken.add(runs[-1])
                break
    return found


def _find(name: str, annotation: Any, texts: Sequence[str]) -> Any:
    annotation = _unwrap_optional(annotation)
    choices = _choices(annotation)
    if choices:
        return _latest_choice(choices, texts)
    if annotation is bool:
        return _affirmed(name, texts[-1]) if texts else None
    if annotation in (int, float):
        return _number_near(name, texts)
    if annotation is str:
        for text in reversed(texts):
            found = values.string_for(name, text)
            if found is not None:
                return found
    return None


_YES = re.compile(r"^\s*(yes|yep|yeah|ok|okay|sure|go ahead|please do)\b", re.IGNORECASE)
_NO = re.compile(r"\b(no|not|don't|do not|cancel|stop|wait)\b", re.IGNORECASE)


def _affirmed(name: str, latest: str) -> bool | None:
    """A yes/no field (e.g. `confirmed`): true when the LATEST user message says yes to it.

    "yes", or the field's own word ("confirm" for `confirmed`), without a "no"/"cancel".
    Anything earlier never counts, so a stale "yes" cannot confirm a changed request.
    """
    stem = _stem(name.split("_")[-1].lower())[:6]
    said_it = bool(_YES.search(latest)) or (len(stem) >= 4 and stem in latest.lower())
    if said_it and not _NO.search(latest):
        return True
    return None


def _latest_choice(choices: list[Any], texts: Sequence[str]) -> Any:
    mentions: list[tuple[int, int, Any]] = []
    for index, text in enumerate(texts):
        for choice in choices:
            for form in _choice_forms(choice):
                pattern = r"\b" + re.escape(form).replace(r"\ ", r"[\s_-]+") + r"\b"
                for match in re.finditer(pattern, text, flags=re.IGNORECASE):
                    mentions.append((index, match.start(), choice))
    if not mentions:
        return None
    mentions.sort(key=lambda m: (m[0], m[1]))
    # Read the turns in order, as a person would: each mention sets the value, and a turn
    # that goes back to the "first plan" without naming one restores the earliest mention.
    value = None
    for index, text in enumerate(texts):
        named = [m[2] for m in mentions if m[0] == index]
        if named:
            value = named[-1]
        elif value is not None and _BACK_TO_FIRST.search(text):
            value = mentions[0][2]
    return None if value is None else _choice_value(value)


_NOUN_SYNONYMS = {
    "kid": ("child", "children", "kids"),
    "child": ("kid", "kids", "children"),
    "people": ("person", "persons", "guest", "guests", "of us"),
    "person": ("people", "persons", "guest", "guests"),
    "guest": ("people", "person", "persons", "guests"),
    "adult": ("adults", "grown-ups", "grownups"),
    "room": ("rooms", "suite", "suites"),
    "night": ("nights",),
}
"""Words that name the same thing as a field's noun ("2 children" for `kids`)."""


def _number_near(name: str, texts: Sequence[str]) -> int | None:
    parts = [
        p
        for p in name.lower().split("_")
        if p not in {"num", "number", "count", "qty", "quantity", "of", "n", "total"}
    ]
    nouns: set[str] = set()
    for part in parts or [name.lower()]:
        singular = part[:-1] if part.endswith("s") and len(part) > 3 else part
        nouns.update({singular, singular + "s", singular + "es", part})
        nouns.update(_NOUN_SYNONYMS.get(singular, ()))
    noun_alt = "|".join(re.escape(n) for n in sorted(nouns, key=len, reverse=True))
    pattern = re.compile(
        rf"\b(?P<n>\d+|{_NUMBER_ALT})\s+(?:[a-z]+\s+)?(?:{noun_alt})\b", re.IGNORECASE
    )
    value: int | None = None
    for text in texts:
        for match in pattern.finditer(text):
            raw = re.sub(r"\s+", " ", match.group("n").lower())
            value = int(raw) if raw.isdigit() else _NUMBER_WORDS.get(raw, value)
    return value


def _unwrap_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _choices(annotation: Any) -> list[Any]:
    annotation = _unwrap_optional(annotation)
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return list(annotation)
    return []


def _choice_forms(choice: Any) -> list[str]:
    if isinstance(choice, enum.Enum):
        return [str(choice.value), choice.name.lower().replace("_", " ")]
    return [str(choice)]


def _choice_value(choice: Any) -> Any:
    return choice.value if isinstance(choice, enum.Enum) else choice


def _describe(name: str, annotation: Any) -> str:
    choices = _choices(annotation)
    if not choices:
        return name.replace("_", " ")
    return f"{name.replace('_', ' ')} ({_join([str(_choice_value(c)) for c in choices], 'or')})"


def _join(items: Sequence[str], word: str = "and") -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {word} " + items[-1]


def _request_model_of(output_type: type[BaseModel]) -> type[BaseModel] | None:
    model = getattr(output_type, "request_model", None)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return model
    field = output_type.model_fields.get("request")
    if field is None or "need_more_info" not in output_type.model_fields:
        return None
    inner = _unwrap_optional(field.annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


_PRONOUNS = [
    (r"\bthe user's\b", "your"),
    (r"\bthe user\b", "you"),
    (r"\bthe customer's\b", "your"),
    (r"\bthe customer\b", "you"),
    (r"\btheir\b", "your"),
    (r"\bthemselves\b", "yourself"),
    (r"\bthey\b", "you"),
    (r"\bthem\b", "you"),
]
_INSTRUCTIONS = [
    (r"ask (?:the user|them) to confirm (?:that )?(.+)", "Please confirm: {}."),
    (r"ask (?:the user|them) (?:whether|if) (.+)", "Could you tell me whether {}?"),
    (r"ask (?:the user|them) (?:for|about) (.+)", "Could you tell me {}?"),
    (r"ask (?:the user|them) (.+)", "Could you tell me {}?"),
    (r"(?:tell|inform) (?:the user|them) (?:that )?(.+)", "{}."),
    (r"let (?:the user|them) know (?:that )?(.+)", "{}."),
]


def _second_person(text: str) -> str:
    for pattern, replacement in _PRONOUNS:
        text = re.sub(pattern, replacement, text, flags=re.IGNORECASE)
    return text


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_APOLOGISE = re.compile(r"apologi[sz]e\b\s*(?:to (?:the user|them)\s*)?(.*)", re.IGNORECASE)
# Sentences about how to write the reply, not what it says: the stand-in leaves them out.
_STYLE = re.compile(
    r"(be|reply|keep|answer|do not|don't|never|use|avoid|mention|respond|write)\b", re.IGNORECASE
)


def reply_from_instruction(instruction: str) -> str:
    """A reply that carries out `instruction`, sentence by sentence.

    "Ask the user to confirm X" becomes "Please confirm: X.", "Tell the user that Y" becomes
    "Y.", "Apologise for Z" becomes "Sorry for Z.", and sentences about style ("Be brief")
    are left out.
    """
    parts = [_reply_sentence(s) for s in _SENTENCE.split(" ".join(instruction.split()))]
    body = " ".join(p for p in parts if p) or "Done."
    return f"{LABEL} {body}"


def _reply_sentence(sentence: str) -> str:
    text = sentence.rstrip(".!?; ")
    if not text:
        return ""
    for pattern, template in _INSTRUCTIONS:
        match = re.fullmatch(pattern, text, flags=re.IGNORECASE)
        if match:
            return _capitalised(template.format(_second_person(match.group(1))))
    apology = _APOLOGISE.fullmatch(text)
    if apology:
        rest = _second_person(apology.group(1))
        return "Sorry" + (f" {rest}" if rest and not rest.startswith("that") else "") + "."
    if _STYLE.match(text):
        return ""
    return _capitalised(_second_person(text)) + "."


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


_REQUEST_CUE = re.compile(
    r"\b(want|like|need|please|can i|could|would|refund|order|buy|cancel|change|return|"
    r"deliver|book|send|help)\b",
    re.IGNORECASE,
)


def summarise(messages: Sequence[Message]) -> str:
    """An extractive summary: sentences with names, numbers, or the user's requests."""
    lines: list[str] = []
    for index, message in enumerate(messages):
        previous = message["content"].split(f"{SUMMARY_LABEL}\n", 1)
        if index == 0 and message["role"] == "user" and len(previous) == 2:
            # The summary so far, as this stand-in wrote it: its lines are carried over,
            # the label the summariser put before it is not a turn.
            lines.extend(ln for ln in previous[1].splitlines() if ln.startswith("- "))
            continue
        for role, text in _segments(message):
            if text.startswith(SUMMARY_LABEL):
                lines.extend(ln for ln in text.splitlines() if ln.startswith("- "))
                continue
            for sentence in re.split(r"(?<=[.!?])\s+", text):
                sentence = sentence.strip()
                if sentence and _keep(role, sentence):
                    lines.append(f"- {role}: {sentence}")
    unique = list(dict.fromkeys(lines))
    if not unique:
        return f"{SUMMARY_LABEL} nothing to keep (no names, numbers or requests)."
    return "\n".join([SUMMARY_LABEL, *unique])


def _segments(message: Message) -> list[tuple[str, str]]:
    """(role, text) pieces; a transcript inside one message is split by its `user:` lines."""
    pieces: list[tuple[str, str]] = []
    role: str = message["role"]
    buffer: list[str] = []
    for line in message["content"].splitlines():
        match = re.match(r"\s*(user|assistant)\s*:\s*(.*)", line, flags=re.IGNORECASE)
        if match:
            if buffer:
                pieces.append((role, "\n".join(buffer)))
            role, buffer = match.group(1).lower(), [match.group(2)]
        else:
            buffer.append(line)
    if buffer:
        pieces.append((role, "\n".join(buffer).strip()))
    return pieces


def _keep(role: str, sentence: str) -> bool:
    if LABEL in sentence and role == "assistant" and not re.search(r"\d", sentence):
        return False
    if re.search(r"\d", sentence):
        return True
    if role != "user":
        return False
    names = re.findall(r"(?<!^)(?<![.!?]\s)\b[A-Z][a-z]+", sentence)
    return bool(names) or bool(_REQUEST_CUE.search(sentence))
