"""What a business is (`Profile`) and where it runs (`Timeouts`, `AuditSettings`,
`JobSettings`): frozen values an `Orchestrator` reads once, when it is built.

One deployment may serve several businesses (`Orchestrator(profiles={"cards": ...,
"loans": ...})`); each conversation records the profile that answers it (docs/profiles.md).
A new per-business setting is one field of `Profile`: `Orchestrator(name=...)` accepts it
as a flat keyword by its name (`flat_settings`), nothing else to change.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from frontdesk.errors import ConfigError
from frontdesk.experts import Category
from frontdesk.experts.category import check_registry
from frontdesk.jobs.runner import DEFAULT_CONCURRENCY, JOBS_MODES, JobsMode
from frontdesk.memory_policy import MemoryPolicy
from frontdesk.orchestrator._input import DEFAULT_MAX_MESSAGE_CHARS
from frontdesk.orchestrator.config import ExpertSettings, ModelChoice
from frontdesk.orchestrator.confirmation import DEFAULT_TTL as DEFAULT_CONFIRM_TTL
from frontdesk.orchestrator.fallbacks import Unreadable
from frontdesk.orchestrator.language import check_languages
from frontdesk.orchestrator.multi_intent import MultiIntent
from frontdesk.orchestrator.multi_intent import check_mode as check_multi_intent
from frontdesk.orchestrator.past_conversations import IDLE_AFTER
from frontdesk.orchestrator.pending import DEFAULT_TTL as DEFAULT_PENDING_TTL
from frontdesk.orchestrator.resolution import ASSUME_AFTER, assume_seconds, check_variants
from frontdesk.orchestrator.review import DEFAULT_FALLBACK as DEFAULT_REVIEW_FALLBACK
from frontdesk.orchestrator.screen import ScreenFunction, ScreenMode, check_mode
from frontdesk.orchestrator.spend import SpendLimit
from frontdesk.threads.budget import Budget
from frontdesk.threads.compaction import CompactionPolicy
from frontdesk.threads.handoff import HandoffPolicy
from frontdesk.threads.models import DEFAULT_PROFILE as _DEFAULT_PROFILE
from frontdesk.threads.store import DEFAULT_LEASE_TTL

if TYPE_CHECKING:
    from frontdesk.audit.crypto import KeyProvider
    from frontdesk.audit.store import AuditLog
    from frontdesk.experts.providers.embeddings import Embedder
    from frontdesk.experts.router import EmbeddingRouter
    from frontdesk.orchestrator.erasure import RetentionPolicy
    from frontdesk.redaction import RedactionPolicy, Redactor
    from frontdesk.threads.memory import Retriever
    from frontdesk.threads.tokens import TokenCounter

__all__ = [
    "DEFAULT_PROFILE",
    "AuditSettings",
    "CompactionPolicy",
    "HandoffPolicy",
    "JobSettings",
    "Profile",
    "Timeouts",
    "check_profile_name",
    "flat_settings",
]

DEFAULT_PROFILE = _DEFAULT_PROFILE
"""The name of an orchestrator's one profile (`Orchestrator(profile=...)`, or flat keywords)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_profile_name(name: object) -> str:
    """A profile name as stored on conversations (at most 64 letters, digits, `_.-`).

    Raises:
        ConfigError: anything else.
    """
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise ConfigError(
            f"profile name {name!r} must be 1 to 64 letters, digits, '_', '.' or '-'"
            " (starting with a letter or digit)"
        )
    return name


@dataclass(frozen=True)
class Profile:
    """What a business is: its categories, models, prompts and policies.

    Args:
        categories: The registered categories (`experts.Category`).
        model: A spec (`"anthropic:claude-sonnet-4-5"`, `"openai:gpt-4.1-mini"`,
            `"openai:NAME@BASE_URL"`, `"offline"`), a `Model`, a fallback list, or a map
            from expert name (`triage`, `request`, `response`, `summariser`, `memory`,
            `default`) to either. `None` picks a provider whose API key is set, else the
            offline stand-in.
        prompts: A folder whose `<name>.md` files replace the built-in prompts
            (`prompts_dir=` in the flat form).
        business_name: How the response expert names the business ("Sample Bank").
        budgets: Token budgets per expert (`threads.Budget`), replacing the defaults.
        handoff: What a user is told while a person has the conversation, and how long
            they may wait (`handoff_message=`, `handoff_timeout=`,
            `handoff_timeout_message=` in the flat form).
        compaction: When and how the summariser compacts long threads.
        knowledge_source: The library of documents this profile's turns read and
            `orch.knowledge` writes for it: another profile's name shares that profile's
            documents; `None` (the default) its own name (docs/profiles.md).
        settings: Per-expert model settings.
        context: Extra data handed to every handler in `HandlerContext.extras`.
        handler_errors: What a handler's exception does: `"reply"` answers the apology
            (logging `handler.failed`); `"raise"` (development, tests) fails the turn with
            `HandlerFailed`.
        max_message_chars: Longest accepted user message.
        speculate: Start the request expert of the conversation's current category
            alongside triage (kept when triage agrees, cancelled and audited when not).
        token_counter: Counts message tokens (a fast local estimate by default).
        retriever: Finds each turn's memories (`threads.memory.Retriever`).
        memory: Read and write long-term memory in turns (`False`: no turn does).
        knowledge: Look up the business's documents in turns (`False`: no turn does).
        embeddings: An embeddings endpoint combined with the full text's ranking.
        summarise_idle_after: How long a conversation goes without a message before its
            summary is kept as a memory of its user.
        assume_after: Seconds (or a timedelta) with no customer message after a bot
            answer before the conversation is `assumed_resolved` (default 24 h).
        variants: Prompt variants per expert (`{"response": {"a": "response", "b":
            "response_v2"}}`): one per conversation, by a stable hash of its id.
        memory_policy: What the memory expert may keep (`MemoryPolicy`; `None`: the
            default policy, which refuses claims of status, permissions, limits, roles or
            verification, identifiers and secrets). See docs/memory.md.
        past_conversations: Keep the summaries of a user's idle and handed-back
            conversations and send them (as the customer's words) in their later
            conversations; `False`: none is kept or sent.
        scrub_secrets: After a turn whose request has ruled fields (`Redact`), its stored
            user message and outcome hold their shown forms (`[PIN]`, `******0123`), so
            later experts, summaries, people and backups never see the values; the audit
            keeps the original (encrypted per user with a master key). `False` keeps the
            message as written (every view still shows the rules). docs/privacy.md.
        router: A fast first stage in front of the triage expert (`EmbeddingRouter`): a
            message near one category's examples is routed with no triage call; otherwise
            triage chooses among the router's candidates only. Off (`None`) by default.
            docs/routing.md.
        on_unreadable: What a triage or request answer that stays unreadable after its
            retries does: `"ask"` (the default) asks the customer again (for the request's
            missing fields, or to say it another way), and a fourth unreadable turn in a
            row hands off; `"handoff"` hands off to a person at once.

    Safeguards before the bot acts or speaks (docs/safeguards.md):

    Args:
        confirm_ttl: How long a request of a `Category(confirm=...)` waits for the
            customer's yes (a `timedelta` or seconds; 15 minutes); a later yes asks again.
        screen: A check of each customer message before triage, `async (text, context)
            -> Screen` (`HeuristicScreen` is built in): `refuse` stores the message and a
            safe reply with no model call, `handoff` hands off.
        screen_mode: `"enforce"` acts on the verdicts; `"shadow"` only audits and counts
            them (`frontdesk_screen_verdicts_total`).
        spend_limit: Tokens and estimated cost per user (or conversation) over a window
            (`SpendLimit`), counted from the stored turns' usage; over it, a turn raises
            `SpendLimitReached` before any model call.
        review: Check each draft reply with the review expert (`"review"` in the model
            map; else `default`, else the response expert's model); a rejected draft is
            written again once with the reviewer's note, then `review_fallback` is sent.
        review_rules: The business's rules every reply must keep, for the reviewer.
        review_fallback: What is sent when two drafts in a row fail the review.

    Conversations as people have them (docs/conversations.md):

    Args:
        multi_intent: A message with several requests (up to 3): `"sequential"` (the
            default) handles each in turn in one reply; `"ask"` asks which first.
        languages: The languages the bot answers in (BCP 47 tags, `["en", "cy"]`); a
            message in another is answered in the first listed. `None`: any language.
        pending_ttl: How long a request in progress (missing fields) waits for the
            customer to come back to it (a `timedelta` or seconds; 30 minutes).
    """

    categories: Sequence[Category]
    _: KW_ONLY
    model: ModelChoice = None
    prompts: Path | str | None = None
    business_name: str | None = None
    budgets: Mapping[str, Budget] | None = None
    handoff: HandoffPolicy = field(default_factory=HandoffPolicy)
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)
    knowledge_source: str | None = None
    settings: ExpertSettings = field(default_factory=ExpertSettings)
    context: Mapping[str, Any] | None = None
    handler_errors: Literal["reply", "raise"] = "reply"
    max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS
    speculate: bool = True
    token_counter: TokenCounter | None = None
    retriever: Retriever | None = None
    memory: bool = True
    knowledge: bool = True
    embeddings: Embedder | None = None
    summarise_idle_after: timedelta = IDLE_AFTER
    # Did it help (docs/outcomes.md).
    assume_after: float | timedelta = ASSUME_AFTER
    variants: Mapping[str, Mapping[str, str]] | None = None
    memory_policy: MemoryPolicy | None = None
    past_conversations: bool = True
    scrub_secrets: bool = True
    on_unreadable: Unreadable = "ask"
    router: EmbeddingRouter | None = None
    # Safeguards (docs/safeguards.md).
    confirm_ttl: timedelta | float = DEFAULT_CONFIRM_TTL
    screen: ScreenFunction | None = None
    screen_mode: ScreenMode = "enforce"
    spend_limit: SpendLimit | None = None
    review: bool = False
    review_rules: Sequence[str] = ()
    review_fallback: str = DEFAULT_REVIEW_FALLBACK
    # Conversations as people have them (docs/conversations.md).
    multi_intent: MultiIntent = "sequential"
    languages: Sequence[str] | None = None
    pending_ttl: timedelta | float = DEFAULT_PENDING_TTL

    def __post_init__(self) -> None:
        categories = tuple(check_registry(list(self.categories)).values())
        object.__setattr__(self, "categories", categories)
        self._check()

    def _check(self) -> None:
        if self.on_unreadable not in ("ask", "handoff"):
            raise ConfigError(
                f"on_unreadable must be 'ask' or 'handoff', not {self.on_unreadable!r}"
            )
        if self.handler_errors not in ("reply", "raise"):
            raise ConfigError(
                f"handler_errors must be 'reply' or 'raise', not {self.handler_errors!r}"
            )
        if not isinstance(self.handoff, HandoffPolicy):
            raise ConfigError(f"handoff must be a HandoffPolicy, got {self.handoff!r}")
        if not isinstance(self.compaction, CompactionPolicy):
            raise ConfigError(f"compaction must be a CompactionPolicy, got {self.compaction!r}")
        if not isinstance(self.summarise_idle_after, timedelta) or (
            self.summarise_idle_after <= timedelta(0)
        ):
            raise ConfigError(
                "summarise_idle_after must be a positive timedelta,"
                f" got {self.summarise_idle_after!r}"
            )
        if self.knowledge_source is not None:
            check_profile_name(self.knowledge_source)
        assume_seconds(self.assume_after)
        check_variants(self.variants)
        if self.memory_policy is not None and not isinstance(self.memory_policy, MemoryPolicy):
            kind = type(self.memory_policy).__name__
            raise ConfigError(f"memory_policy must be a frontdesk.MemoryPolicy, not {kind}")
        if not isinstance(self.past_conversations, bool):
            raise ConfigError("past_conversations must be True or False")
        if self.router is not None:
            from frontdesk.experts.router import EmbeddingRouter

            if not isinstance(self.router, EmbeddingRouter):
                raise ConfigError(
                    f"router must be a frontdesk.EmbeddingRouter, not {type(self.router).__name__}"
                )
        self._check_safeguards()
        check_multi_intent(self.multi_intent)
        object.__setattr__(self, "languages", check_languages(self.languages))
        ttl = self.pending_ttl
        if isinstance(ttl, bool) or not isinstance(ttl, timedelta | int | float):
            raise ConfigError(
                f"pending_ttl must be a timedelta or a number of seconds, got {ttl!r}"
            )
        ttl = ttl if isinstance(ttl, timedelta) else timedelta(seconds=ttl)
        if ttl <= timedelta(0):
            raise ConfigError(f"pending_ttl must be positive, got {self.pending_ttl!r}")
        object.__setattr__(self, "pending_ttl", ttl)

    def _check_safeguards(self) -> None:
        ttl = self.confirm_ttl
        if isinstance(ttl, bool) or not isinstance(ttl, timedelta | int | float):
            raise ConfigError(
                f"confirm_ttl must be a timedelta or a number of seconds, got {ttl!r}"
            )
        if not isinstance(ttl, timedelta):
            ttl = timedelta(seconds=ttl)
        if ttl <= timedelta(0):
            raise ConfigError(f"confirm_ttl must be positive, got {self.confirm_ttl!r}")
        object.__setattr__(self, "confirm_ttl", ttl)
        if self.screen is not None and not callable(self.screen):
            raise ConfigError(
                f"screen must be an async (text, context) -> Screen, not {self.screen!r}"
            )
        check_mode(self.screen_mode)
        if self.spend_limit is not None and not isinstance(self.spend_limit, SpendLimit):
            raise ConfigError(f"spend_limit must be a SpendLimit, not {self.spend_limit!r}")
        if not isinstance(self.review_fallback, str) or not self.review_fallback.strip():
            raise ConfigError("review_fallback must be a non-empty text")
        rules = tuple(self.review_rules)
        if any(not isinstance(r, str) or not r.strip() for r in rules):
            raise ConfigError("review_rules must be non-empty texts")
        object.__setattr__(self, "review_rules", rules)

    @property
    def confirm_window(self) -> timedelta:
        """`confirm_ttl` as a `timedelta` (seconds given are turned into one)."""
        ttl = self.confirm_ttl
        return ttl if isinstance(ttl, timedelta) else timedelta(seconds=ttl)

    @property
    def pending_window(self) -> timedelta:
        """`pending_ttl` as a `timedelta` (seconds given are turned into one)."""
        ttl = self.pending_ttl
        return ttl if isinstance(ttl, timedelta) else timedelta(seconds=ttl)

    def replace(self, **changes: Any) -> Profile:
        """A copy with `changes` (the same names as the constructor)."""
        return dataclasses.replace(self, **changes)


_PROFILE_FIELDS = tuple(f.name for f in dataclasses.fields(Profile) if f.name != "categories")


@dataclass(frozen=True, kw_only=True)
class Timeouts:
    """How long a turn may wait and run (where it runs, not what the business is).

    Args:
        lock_timeout: Seconds a turn waits for another turn on the same conversation.
        lock_ttl: Seconds after which the lock of a crashed process expires (a running
            turn renews its lock every third of it).
        turn_deadline: Seconds a turn's expert calls may take in all (retries included);
            past it the turn fails with `TurnFailed(stage="deadline")`. `None`: none.
    """

    lock_timeout: float = 30.0
    lock_ttl: float = DEFAULT_LEASE_TTL
    turn_deadline: float | None = 120.0

    def __post_init__(self) -> None:
        if self.turn_deadline is not None and self.turn_deadline <= 0:
            raise ConfigError(
                f"turn_deadline must be > 0 seconds or None, got {self.turn_deadline}"
            )
        if self.lock_timeout < 0 or self.lock_ttl <= 0:
            raise ConfigError("lock_timeout must be >= 0 and lock_ttl > 0 seconds")


@dataclass(frozen=True, kw_only=True)
class AuditSettings:
    """Where the audit log is and how it behaves.

    Args:
        log: `True` (the conversation database), a URL, an `AuditLog`, or `False` (none).
        on_failure: `"raise"` fails the turn when the log cannot be written; `"spool"`
            keeps the events in a local file for later (`audit_on_failure=`).
        key: The master key that encrypts payloads per user: 32 bytes, base64 text, or a
            `KeyProvider`; `None` reads `FRONTDESK_MASTER_KEY` (`audit_key=`).
        retention: Shred payloads older than an age as a periodic job: a
            `RetentionPolicy` or an age (`timedelta`, `"90d"`); `None`: no retention.
        redaction: What the clear-text views of the records show of personal data
            (`RedactionPolicy` or `Redactor`; the default redacts every built-in detector).
    """

    log: bool | str | AuditLog = True
    on_failure: Literal["raise", "spool"] = "raise"
    key: bytes | str | KeyProvider | None = None
    retention: RetentionPolicy | timedelta | str | None = None
    redaction: RedactionPolicy | Redactor | None = None

    def __post_init__(self) -> None:
        if self.on_failure not in ("raise", "spool"):
            raise ConfigError(
                f"audit on_failure must be 'raise' or 'spool', not {self.on_failure!r}"
            )


@dataclass(frozen=True, kw_only=True)
class JobSettings:
    """Where the background jobs (learning, compaction, hand-off timeouts) run.

    Args:
        mode: `inline` in this process, `worker` in `frontdesk worker` processes.
        concurrency: Jobs this process runs at once (`inline`; `job_concurrency=`).
    """

    mode: JobsMode = "inline"
    concurrency: int = DEFAULT_CONCURRENCY

    def __post_init__(self) -> None:
        if self.mode not in JOBS_MODES:
            raise ConfigError(f"jobs must be 'inline' or 'worker', got {self.mode!r}")
        if isinstance(self.concurrency, bool) or self.concurrency < 1:
            raise ConfigError(f"job_concurrency must be >= 1, got {self.concurrency}")


# The flat keywords of `Orchestrator(...)` that are not a field of the same name: which
# settings object takes them, under which name.
_RENAMED: Mapping[str, tuple[str, str]] = {
    "prompts_dir": ("profile", "prompts"),
    "shop_name": ("profile", "business_name"),
    "handoff_message": ("handoff", "waiting_message"),
    "handoff_timeout": ("handoff", "timeout"),
    "handoff_timeout_message": ("handoff", "timeout_message"),
    "audit_on_failure": ("audit", "on_failure"),
    "audit_key": ("audit", "key"),
    "retention": ("audit", "retention"),
    "redaction": ("audit", "redaction"),
    "job_concurrency": ("jobs", "concurrency"),
}
_TIMEOUTS = tuple(f.name for f in dataclasses.fields(Timeouts))


@dataclass
class FlatSettings:
    """Flat keywords sorted by the settings object that takes them."""

    profile: dict[str, Any] = field(default_factory=dict)
    handoff: dict[str, Any] = field(default_factory=dict)
    timeouts: dict[str, Any] = field(default_factory=dict)
    audit: dict[str, Any] = field(default_factory=dict)
    jobs: dict[str, Any] = field(default_factory=dict)


def flat_settings(flat: Mapping[str, Any]) -> FlatSettings:
    """Sort `Orchestrator`'s flat keywords (the short form) by where each now lives.

    Raises:
        TypeError: an unknown keyword, naming where settings live.
    """
    out = FlatSettings()
    if "business_name" in flat and "shop_name" in flat:
        if flat["business_name"] != flat["shop_name"]:
            raise ConfigError("pass business_name= (shop_name is its old name), not both")
        flat = {k: v for k, v in flat.items() if k != "shop_name"}
    for name, value in flat.items():
        if name in _PROFILE_FIELDS:
            out.profile[name] = value
        elif name in _TIMEOUTS:
            out.timeouts[name] = value
        elif name in _RENAMED:
            where, key = _RENAMED[name]
            getattr(out, where)[key] = value
        else:
            known = (*_PROFILE_FIELDS, *_TIMEOUTS, *_RENAMED)
            raise TypeError(
                f"Orchestrator() got an unexpected keyword argument {name!r}"
                f"{_hint(name, known)}. What a business is lives in Profile(categories, ...)"
                f" ({', '.join(_PROFILE_FIELDS)}); where it runs in Orchestrator(store=...,"
                " audit=AuditSettings(...), jobs=JobSettings(...), timeouts=Timeouts(...))"
            )
    return out


def _hint(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
