"""A Hypothesis state machine over the public turn API: handle, edit, regenerate,
switch_branch, retries with the same client message id, provider failures and background
compaction, on a real SQLite store with the audit log on.

After every step: the active path is a path of the tree ending at a leaf; the user thread
is a suffix of that path and alternates user/assistant; each client message id is stored
once; the audit chain verifies.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from frontdesk import SyncOrchestrator
from frontdesk.errors import ModelAPIError, TurnFailed
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.threads.compaction import CompactionPolicy

CONV = "c"
USER = "u-1"
texts = st.sampled_from(["hello", "a bag of purple", "two bags of idaho", "refund please"])


class TurnMachine(RuleBasedStateMachine):
    """The model: which client ids were sent with which text, and whether a turn failed."""

    compactions_seen = 0

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        self.failing = False
        self.sent: dict[str, str] = {}  # client message id -> text
        self.pending: str | None = None  # A failed turn's client id, not yet retried.
        self.counter = 0
        self.compactions = 0
        self.orch = SyncOrchestrator(
            potato_categories(),
            model=FunctionModel(self._answer),
            store=f"sqlite:///{Path(self._dir.name) / 'frontdesk.db'}",
            compaction=CompactionPolicy(threshold=40, keep_exchanges=1),
        )

    def _answer(self, request: ModelRequest) -> Any:
        if request.expert == "triage":
            return {"category": "OTHER", "reason": "chat"}
        if request.expert == "summariser":
            self.compactions += 1
            return "The user talked about potatoes."
        if self.failing:
            raise ModelAPIError("the provider is down", model="function")
        self.counter += 1
        return f"reply {self.counter}"

    def _store(self) -> Any:
        return self.orch.orchestrator.store

    def _run(self, coroutine: Any) -> Any:
        return self.orch._runner.run(coroutine)

    def _settle(self) -> None:
        """Let background compactions finish, so each check reads a quiet database."""

        async def settle() -> None:
            orchestrator = await self.orch.orchestrator.open()
            await orchestrator.compaction.wait()

        self._run(settle())

    def _messages(self) -> list[Any]:
        try:
            return list(self._run(self._store().messages(CONV)))
        except Exception:
            return []

    def _transcript(self) -> list[Any]:
        if not self.sent:
            return []
        return self.orch.transcript(CONV, user_id=USER)

    # -- rules --------------------------------------------------------------------------

    @precondition(lambda self: self.pending is None)
    @rule(text=texts)
    def handle(self, text: str) -> None:
        client_id = f"m-{len(self.sent)}"
        self.sent[client_id] = text
        reply = self.orch.handle(CONV, text, user_id=USER, client_message_id=client_id)
        assert reply.text.startswith("reply ")

    @precondition(lambda self: self.pending is None)
    @rule(text=texts)
    def failure(self, text: str) -> None:
        client_id = f"m-{len(self.sent)}"
        self.sent[client_id] = text
        self.failing = True
        try:
            self.orch.handle(CONV, text, user_id=USER, client_message_id=client_id)
            raise AssertionError("the turn should have failed")
        except TurnFailed:
            self.pending = client_id
        finally:
            self.failing = False

    @precondition(lambda self: bool(self.sent))
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        client_id = self.pending or data.draw(st.sampled_from(sorted(self.sent)))
        reply = self.orch.handle(
            CONV, self.sent[client_id], user_id=USER, client_message_id=client_id
        )
        assert reply.text.startswith("reply ")
        self.pending = None

    @precondition(lambda self: self.pending is None and bool(self.sent))
    @rule(data=st.data(), text=texts)
    def edit(self, data: st.DataObject, text: str) -> None:
        users = [m for m in self._messages() if m.role == "user"]
        target = data.draw(st.sampled_from(users))
        self.orch.edit(target.id, text, user_id=USER)

    @precondition(lambda self: self.pending is None and bool(self.sent))
    @rule(data=st.data())
    def regenerate(self, data: st.DataObject) -> None:
        answers = [m for m in self._messages() if m.role == "assistant"]
        if answers:
            self.orch.regenerate(data.draw(st.sampled_from(answers)).id, user_id=USER)

    @precondition(lambda self: self.pending is None and bool(self.sent))
    @rule(data=st.data())
    def switch_branch(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(self._messages()))  # Leaves and inner nodes.
        path = self.orch.switch_branch(CONV, target.id, user_id=USER)
        assert target.id in [m.id for m in path]

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def the_active_path_is_a_path_of_the_tree_ending_at_a_leaf(self) -> None:
        self._settle()
        path = self._transcript()
        if not path:
            return
        by_id = {m.id: m for m in self._messages()}
        assert path[0].parent_id is None
        for parent, child in zip(path, path[1:], strict=False):
            assert child.parent_id == parent.id and child.id in by_id
        leaves = {m.id for m in self.orch.branches(CONV, user_id=USER)}
        assert path[-1].id in leaves

    @invariant()
    def the_thread_alternates_and_is_a_suffix_of_the_path(self) -> None:
        self._settle()
        if not self.sent:
            return
        thread = self.orch.user_thread(CONV, user_id=USER)
        turns = [(m.role, m.content) for m in thread.messages]
        path = [(m.role, m.content) for m in self._transcript()]
        assert turns == path[len(path) - len(turns) :]
        assert [role for role, _ in turns] == [
            "user" if i % 2 == 0 else "assistant" for i in range(len(turns))
        ]
        if self.pending is None:  # A failed turn's message waits for its retry.
            assert not turns or turns[-1][0] == "assistant"

    @invariant()
    def each_client_message_id_is_stored_once(self) -> None:
        self._settle()
        stored = [m.client_message_id for m in self._messages() if m.client_message_id]
        assert len(stored) == len(set(stored))
        assert set(stored) == set(self.sent)

    @invariant()
    def the_audit_verifies(self) -> None:
        self._settle()
        audit = self.orch.orchestrator.audit_log
        if audit is not None and self.sent:
            assert self._run(audit.verify(CONV)).ok

    def teardown(self) -> None:
        self.orch.close()
        TurnMachine.compactions_seen += self.compactions
        self._dir.cleanup()


TurnMachine.TestCase.settings = settings(
    max_examples=8,
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_turns_keep_the_thread_whole = TurnMachine.TestCase
