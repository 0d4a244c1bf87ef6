"""A request's ruled values on their way through a turn and after it (docs/privacy.md).

A field marked `Redact("drop")` reaches its handler and nothing else; `mask` and
`pseudonymise` fields show their masked form or token wherever people look. The turn asks
`Secrets.of_turn` once the request is extracted: `None` for a request model without ruled
fields (a plain turn does nothing more), else the turn's values in clear (`TurnSecrets`),
with which the turn

- shows the request as its rules say in the `Reply`, the stream's events and the stored
  outcome (`shown_model`);
- sends the response expert the thread and instruction with the values replaced, and
  replaces them in the reply;
- keeps a digest of each value per user and, with `scrub_secrets`, rewrites the stored user
  message (`threads.ruled_values.Scrub`, in the turn's own transactions).

After the turn, `Secrets.values` reads a user's kept digests (`frontdesk.ruled.RuledValues`)
for what the summariser and the memory expert are sent and what they return, and for the
views and exports of any conversation of that user.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from frontdesk.db import AsyncEngine
from frontdesk.redaction import Redactor, Rule, field_rules
from frontdesk.ruled import RuledValues, TurnSecrets, owner_of, ruled_key, shown_request
from frontdesk.threads import ruled_values as _sql
from frontdesk.threads.ruled_values import Scrub
from frontdesk.threads.tokens import TokenCounter

__all__ = ["Secrets", "model_of"]


def model_of(cls: type[BaseModel], data: Any) -> BaseModel:
    """`data` as a `cls`: validated, or (a shown request: `[PIN]` where a number was)
    constructed as is."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        if not isinstance(data, Mapping):
            return cls.model_construct()
        shown = {str(err["loc"][0]) for err in e.errors() if err["loc"]}
        model = cls.model_construct(**data)
        for name, value in data.items():  # The fields that are not shown forms stay typed.
            if name not in shown and name in cls.model_fields:
                with contextlib.suppress(ValidationError):
                    cls.__pydantic_validator__.validate_assignment(model, name, value)
        return model


@dataclass(frozen=True, kw_only=True)
class Secrets:
    """What the turns and the background work of one orchestrator need for ruled values."""

    redactor: Redactor
    engine: AsyncEngine
    scrub: bool = True
    """`scrub_secrets`: rewrite the stored user message (and outcome) of a turn with ruled
    values, so later experts, summaries, people and backups never see them."""

    @property
    def key(self) -> bytes:
        """The installation key digests are made with."""
        return ruled_key(self.redactor.policy.secret)

    def change_any(self, models: Iterable[type[BaseModel]]) -> bool:
        """Whether a request of one of `models` may carry a value its rules change (any
        rule but `keep`, or one of the policy's own `fields`): without one, a turn has no
        ruled value to show, hold or scrub (the orchestrator decides it at open)."""
        if self.redactor.policy.fields:
            return True
        return any(rule != "keep" for model in models for rule in field_rules(model).values())

    def rules(self, request: BaseModel | None) -> Mapping[str, Rule]:
        """The rules of `request`'s model, with the policy's own `fields` (empty: none)."""
        if request is None:
            return {}
        rules = field_rules(type(request))
        if self.redactor.policy.fields:
            return {**rules, **self.redactor.policy.fields}
        return rules

    def of_turn(
        self,
        request: BaseModel | None,
        *,
        user_id: str | None,
        conversation_id: str,
        message_id: str,
    ) -> TurnSecrets | None:
        """The turn's ruled values, or `None` when its request has no ruled field (or no
        value in one)."""
        rules = self.rules(request)
        if not rules or request is None:
            return None
        secrets = TurnSecrets.of(
            request.model_dump(mode="json"),
            rules,
            self.redactor,
            key=self.key,
            user_id=user_id,
            conversation_id=conversation_id,
            message_id=message_id,
        )
        return secrets if secrets.known else None

    def shown_model(self, request: BaseModel | None, user_id: str | None) -> BaseModel | None:
        """`request` as people may see it (a copy, each ruled field in its shown form)."""
        rules = self.rules(request)
        if request is None or not rules:
            return request
        data = shown_request(request.model_dump(mode="json"), rules, self.redactor, user_id)
        return model_of(type(request), data)

    def scrub_of(
        self, secrets: TurnSecrets | None, message_id: str, content: str, counter: TokenCounter
    ) -> Scrub | None:
        """What the turn's transaction writes for its values (`None`: nothing)."""
        if secrets is None:
            return None
        if not self.scrub:
            return Scrub(message_id=message_id, rows=secrets.rows)
        scrubbed = secrets.text(content)
        return Scrub(
            message_id=message_id,
            rows=secrets.rows,
            content=scrubbed,
            token_count=counter.count(scrubbed),
        )

    async def values(
        self, *, user_id: str | None = None, conversation_id: str | None = None
    ) -> RuledValues:
        """The kept values of a user (or of a conversation's owner), as a scanner."""
        if user_id is not None:
            rows = await _sql.ruled_values_of(self.engine, user=user_id)
            return RuledValues(self.key, user_id, rows)
        assert conversation_id is not None, "name a user or a conversation"
        rows = await _sql.ruled_values_of(self.engine, conversation_id=conversation_id)
        user = rows[0].user if rows else owner_of(None, conversation_id)
        return RuledValues(self.key, user, rows)

    async def of_message(self, message_id: str) -> RuledValues:
        """The values kept from one user message (a retry of its turn is checked with them)."""
        rows = await _sql.ruled_values_of(self.engine, message_id=message_id)
        return RuledValues(self.key, rows[0].user if rows else "", rows)
