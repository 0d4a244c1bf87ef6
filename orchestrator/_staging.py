"""The store as one turn's pipeline sees it: the reply is staged, not written.

The orchestrator then writes the reply together with the turn's audit batch and the lease
release in one transaction (`ConversationStore.finish_turn`).
"""

from __future__ import annotations

from frontdesk.threads.store import ConversationStore, MessageRecord


class StagingStore(ConversationStore):
    """The store as one turn's pipeline sees it: the reply to the turn's question is
    checked and staged, not written, so that the orchestrator stores it together with the
    audit batch and the lease release in one transaction (`ConversationStore.finish_turn`).
    """

    def __init__(self, store: ConversationStore, question: MessageRecord) -> None:
        """Share `store`'s database; stage the first reply to `question`."""
        self.engine = store.engine
        self.url = store.url
        self._store = store
        self._question = question
        self.staged: MessageRecord | None = None

    async def add_assistant_message(
        self,
        parent_id: str,
        content: str,
        *,
        token_count: int = 0,
        model: str | None = None,
        prompt_versions: dict[str, str] | None = None,
    ) -> MessageRecord:
        """Stage the turn's reply; any other reply is written at once."""
        if parent_id != self._question.id or self.staged is not None:
            return await self._store.add_assistant_message(
                parent_id,
                content,
                token_count=token_count,
                model=model,
                prompt_versions=prompt_versions,
            )
        self.staged = self._store.stage_reply(
            self._question,
            content,
            token_count=token_count,
            model=model,
            prompt_versions=prompt_versions,
        )
        return self.staged
