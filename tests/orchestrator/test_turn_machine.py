"""A Hypothesis state machine over the public turn API: handle, edit, regenerate,
switch_branch, retries with the same client message id, provider failures, background
compaction, and hand-off to a person (hand_off, operator_reply, hand_back), on a real
SQLite store with the audit log on.

After every step: the active path is a path of the tree ending at a leaf; the user thread
is a suffix of that path (consecutive assistant messages joined into one turn) and
alternates user/assistant; each client message id is stored once; while handed off no
model is called; the audit chain verifies, every stored answer audited.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from frontdesk import SyncOrchestrator
from frontdesk.errors import ConversationHandedOff, ModelAPIError, TurnFailed
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.threads.answered import answered_turns
from frontdesk.threads.builder import ASSISTANT_JOIN
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
        self.handed_off = False
        self.orch = SyncOrchestrator(
            potato_categories(),
            model=FunctionModel(self._answer),
            store=f"sqlite:///{Path(self._dir.name) / 'frontdesk.db'}",
            compaction=CompactionPolicy(threshold=40, keep_exchanges=1),
        )

    def _answer(self, request: ModelRequest) -> Any:
        if request.expert != "summariser":
            assert not self.handed_off, "a model was called while a person has the conversation"
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
        assert reply.handoff is self.handed_off
        assert reply.text.startswith("reply ") or self.handed_off

    @precondition(lambda self: self.pending is None and not self.handed_off)
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
        assert reply.text.startswith("reply ") or reply.handoff
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
        answers = [
            m
            for m in self._messages()
            if m.role == "assistant" and m.author == "bot" and m.kind != "handoff"
        ]
        if not answers:
            return
        by_id = {m.id: m for m in self._messages()}
        answer = data.draw(st.sampled_from(answers))
        if answer.parent_id is None or by_id[answer.parent_id].role != "user":
            return  # A timeout's message after another assistant message answers nobody.
        if self.handed_off:
            try:
                self.orch.regenerate(answer.id, user_id=USER)
                raise AssertionError("regenerating while handed off should be refused")
            except ConversationHandedOff:
                return
        self.orch.regenerate(answer.id, user_id=USER)

    @precondition(lambda self: self.pending is None and bool(self.sent))
    @rule(data=st.data())
    def switch_branch(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(self._messages()))  # Leaves and inner nodes.
        path = self.orch.switch_branch(CONV, target.id, user_id=USER)
        assert target.id in [m.id for m in path]

    @precondition(lambda self: self.pending is None and bool(self.sent))
    @rule()
    def hand_off(self) -> None:
        self.orch.hand_off(CONV, "a person is needed")
        self.handed_off = True

    @precondition(lambda self: self.handed_off)
    @rule(text=st.sampled_from(["On it.", "Your order ships today.", "Anything else?"]))
    def operator_reply(self, text: str) -> None:
        message_id = self.orch.operator_reply(CONV, text, operator_id="op-1")
        leaf = self._transcript()[-1]
        assert (leaf.id, leaf.author, leaf.content) == (message_id, "operator:op-1", text)

    @precondition(lambda self: self.handed_off)
    @rule()
    def hand_back(self) -> None:
        self.orch.hand_back(CONV)
        self.handed_off = False

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
        path: list[tuple[str, str]] = []
        for m in self._transcript():  # Consecutive assistant messages make one turn.
            if path and m.role == path[-1][0] == "assistant":
                path[-1] = ("assistant", path[-1][1] + ASSISTANT_JOIN + m.content)
            else:
                path.append((m.role, m.content))
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
            answered = self._run(answered_turns(self._store().engine))
            assert self._run(audit.verify(CONV, answered=answered)).ok

    @invariant()
    def the_hand_off_is_listed_while_open(self) -> None:
        if not self.sent:
            return
        listed = [h.conversation_id for h in self.orch.handoffs()]
        assert listed == ([CONV] if self.handed_off else [])

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
