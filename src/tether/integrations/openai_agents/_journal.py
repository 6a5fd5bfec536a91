"""The journal of one durable run: every completed model call and tool call, by a key that is
the same on every replay of the run.

A drive of a run re-runs the agent from its input; each model call and each tool call looks its
key up here first. A hit hands back what was recorded (the model is not asked again, the tool
body does not run again); a miss runs it and commits a row whose state is the grown journal
before handing the result on. Keys are positional, so they need nothing the model invents:

- model calls: ``m<n>``, the call after ``n`` completed ones in its scope (a call that raised
  takes no number, so an SDK retry of it gets the same key it would get on a replay);
- tool calls: ``t<n>:<call_id>``, a call the nth model answer (0-based) asked for;
- answers: ``answers:<key>``, the human answers given for an approval or a tool's interrupt;
- an approval: ``a<n>:<call_id>``, the approval asked for after the nth model call.

A scope is the run itself, or a tool call: model calls made inside a tool (an agent used as a
tool) key under that tool's key, so parallel tools never share a counter.

Rows (``agent_path`` under ``openai_agents:<runner name>/agent:<agent name>``):

==================  ============  ===========  ========================================
node_id             step_type     status       written
==================  ============  ===========  ========================================
``turn:N``          ``llm_call``  completed    when the Nth model call answered
``turn:N/tool:X``   ``tool_call`` completed    when tool X (asked for by answer N) returned
``turn:N/tool:X``   ``hitl_pause`` interrupted X waits for approval, or called ``interrupt()``
``run_end``         ``run_end``   completed /  once, when the run ends
                                  failed
==================  ============  ===========  ========================================

Every row's state is ``{"journal": [entry, ...]}``, a list that only grows, so the store keeps
only each row's new entries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...checkpoint import Checkpoint
from ...errors import StoreError
from ...interrupt import Answer
from ...serde import FrozenDict

if TYPE_CHECKING:
    from ...store.base import Checkpointer, PendingInterrupt

__all__ = ["Journal", "Scope", "current_journal", "current_scope", "journal_scope", "segment"]

JOURNAL_KEY = "journal"


def segment(kind: str, name: str) -> str:
    """One ``agent_path`` segment; a ``/`` in a name (the SDK allows it) is escaped so the path
    keeps its shape."""
    return f"{kind}:{name.replace('%', '%25').replace('/', '%2F')}"


@dataclass(frozen=True, slots=True)
class Scope:
    """Where calls are made: the run itself, or inside one tool call.

    Attributes:
        key: the prefix of the keys of calls made here (``""`` for the run).
        node: the prefix of their node ids (``""``, or the tool's node id and ``/``).
        path: the ``agent_path`` calls made here extend with ``/agent:<name>``.
    """

    key: str
    node: str
    path: str


@dataclass(slots=True)
class PausedAt:
    """A tool call that raised ``interrupt()``: what its pause row needs."""

    key: str
    node_id: str
    path: str
    tool: str
    call_id: str
    arguments: str
    recorded: dict[str, Any]
    reason: str
    context: Any


@dataclass(slots=True)
class Journal:
    """One drive's view of a run's journal.

    Attributes:
        store: where rows go.
        execution_id: the run.
        path: the runner's ``agent_path`` segment.
        entries: the journal, oldest first (frozen dicts: the store's delta encoder then keeps
            only the new ones).
        owner: the claim on a pending interrupt this drive holds; its first row releases it.
        store_error: the first store failure a journaled call hit (the SDK wraps it, and may
            retry a model call: every later call raises it again; the drive re-raises it).
        paused_at: the tool call whose ``interrupt()`` is pausing the run.
    """

    store: Checkpointer
    execution_id: str
    path: str
    entries: list[FrozenDict] = field(default_factory=list)
    owner: str | None = None
    store_error: StoreError | None = None
    paused_at: PausedAt | None = None
    _index: dict[str, FrozenDict] = field(default_factory=dict)
    _counters: dict[str, int] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    def from_state(
        cls, store: Checkpointer, execution_id: str, path: str, state: dict[str, Any] | None
    ) -> Journal:
        """The journal a row's state holds (empty for ``None``)."""
        journal = cls(store, execution_id, path)
        for entry in (state or {}).get(JOURNAL_KEY, ()):
            journal._add(FrozenDict(entry))
        return journal

    def _add(self, entry: FrozenDict) -> None:
        self.entries.append(entry)
        self._index[entry["k"]] = entry

    def state(self) -> dict[str, Any]:
        """The state of the next row."""
        return {JOURNAL_KEY: list(self.entries)}

    def get(self, key: str) -> FrozenDict | None:
        """The recorded entry of a call, or ``None``."""
        return self._index.get(key)

    def next_model_call(self, scope: Scope) -> tuple[str, int]:
        """The key and index of the next model call in ``scope`` (:meth:`advance` takes them
        once it answered)."""
        n = self._counters.get(scope.key, 0)
        return f"{scope.key}m{n}", n

    def advance(self, scope: Scope) -> None:
        """Count a model call of ``scope`` as answered (live or from the journal)."""
        self._counters[scope.key] = self._counters.get(scope.key, 0) + 1

    def model_calls(self, scope: Scope) -> int:
        """How many model calls ``scope`` has made so far (replayed ones included)."""
        return self._counters.get(scope.key, 0)

    def answers(self, key: str) -> list[Answer]:
        """The answers recorded for an approval or a tool's interrupts, in order, each bound
        to the question it answers (``None`` for an approval, answered by position)."""
        entry = self._index.get(f"answers:{key}")
        return [] if entry is None else [Answer.from_dict(a) for a in entry["answers"]]

    def add_answers(self, key: str, answers: list[Answer]) -> None:
        """Record answers (a claim's, a fork's); the next row commits them."""
        self._add(FrozenDict({"k": f"answers:{key}", "answers": [a.to_dict() for a in answers]}))

    async def record(self, entry: dict[str, Any], checkpoint: Checkpoint) -> None:
        """Add ``entry`` and commit ``checkpoint`` with the grown journal as its state.

        Raises:
            StoreError: the commit failed (kept in :attr:`store_error` too).
        """
        async with self._lock:  # parallel tools: one commit at a time, each with all before it
            self._add(FrozenDict(entry))
            checkpoint.state_snapshot = self.state()
            await self.put(checkpoint)

    async def put(self, checkpoint: Checkpoint, **kw: Any) -> None:
        """Commit a row; the first one after a claimed re-entry releases the claim."""
        try:
            await self.store.aput(checkpoint, release_claim_of=self.owner, **kw)
        except StoreError as exc:
            self.store_error = self.store_error or exc
            raise
        self.owner = None

    async def pause(self, checkpoint: Checkpoint, **kw: Any) -> PendingInterrupt:
        """Commit an interrupted row and its pending interrupt (the run pauses)."""
        async with self._lock:
            checkpoint.state_snapshot = self.state()
            pending = await self.store.arecord_interrupt(
                checkpoint, release_claim_of=self.owner, **kw
            )
            self.owner = None
            return pending


_journal: ContextVar[Journal | None] = ContextVar("tether_oa_journal", default=None)
_scope: ContextVar[Scope | None] = ContextVar("tether_oa_scope", default=None)


def current_journal() -> Journal | None:
    """The journal of the durable run the caller is in, or ``None`` outside one."""
    return _journal.get()


def current_scope(journal: Journal) -> Scope:
    """The scope the caller makes calls in."""
    return _scope.get() or Scope("", "", journal.path)


@contextmanager
def journal_scope(journal: Journal | None, scope: Scope | None = None) -> Iterator[None]:
    """Make calls inside journaled by ``journal``, in ``scope`` (default: the run's)."""
    tokens = (_journal.set(journal), _scope.set(scope))
    try:
        yield
    finally:
        _scope.reset(tokens[1])
        _journal.reset(tokens[0])
