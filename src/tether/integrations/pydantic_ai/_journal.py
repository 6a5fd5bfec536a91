"""The journal of a pydantic-ai run: what each completed model request and tool call gave back.

Every row of the run holds the whole journal in its state (only the new entries are stored,
see :mod:`tether.store._codec`)::

    {"journal": [entry, ...], "answers": {question_key: [Resume.to_dict(), ...]}}

An entry is ``{"key": "model:<s>", "messages": n, "response": ...}`` for the model request of
step ``s`` (sent with ``n`` messages), or ``{"key": "tool:<s>:<tool_call_id>:<k>", "tool": name,
"outcome": ...}`` for the ``k``-th execution of a tool call that the response of step ``s``
asked for. A resume runs the agent again from its start; every step whose key is in the journal
is answered from it instead of running (docs/pydantic_ai.md, "Replay").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import CorruptRecordError
from ...interrupt import Answer
from ...serde import FrozenDict
from .errors import ReplayDivergedError

JOURNAL = "journal"
ANSWERS = "answers"
RUN_QUESTIONS = "run"
"""The answers key of ``interrupt()`` calls made outside any tool (an output validator, an
instructions function): answered by position over the whole drive."""


@dataclass(frozen=True, slots=True)
class Step:
    """The row a journal entry is committed with.

    Attributes:
        node_id: ``turn:<s>`` (a model request) or ``turn:<s>/tool:<name>`` (a tool call).
        step_type: ``llm_call`` or ``tool_call``.
        turn: the step ``s``.
        tool: the tool's name, for a tool call.
        node_input: the row's ``node_input``.
    """

    node_id: str
    step_type: str
    turn: int
    tool: str | None = None
    node_input: Any = None


Commit = Callable[[Step], Awaitable[None]]


def model_node(turn: int) -> str:
    """The ``node_id`` of the model request of step ``turn``."""
    return f"turn:{turn}"


def tool_node(turn: int, tool: str) -> str:
    """The ``node_id`` of a call of ``tool`` asked for by the response of step ``turn``."""
    return f"turn:{turn}/tool:{tool}"


class Journal:
    """One drive's view of the run's journal: the entries replayed, and those it adds.

    Args:
        state: the state of the row the drive starts from (``{}`` for a new run).
        commit: writes the row of an entry just added (the drive's writer).
        execution_id: the run, for error messages.

    Raises:
        CorruptRecordError: ``state`` does not hold a journal.
    """

    def __init__(self, state: Mapping[str, Any], commit: Commit, execution_id: str) -> None:
        entries = state.get(JOURNAL) or []
        answers = state.get(ANSWERS) or {}
        if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("key"), str) for e in entries
        ):
            raise CorruptRecordError(
                f"run {execution_id!r}: the state holds no pydantic-ai journal",
                execution_id=execution_id,
            )
        if not isinstance(answers, dict):
            raise CorruptRecordError(
                f"run {execution_id!r}: the journal's answers are not a dict",
                execution_id=execution_id,
            )
        self.execution_id = execution_id
        self._entries: list[FrozenDict] = [
            e if isinstance(e, FrozenDict) else FrozenDict(e) for e in entries
        ]
        self._by_key = {e["key"]: e for e in self._entries}
        self.answers: dict[str, list[dict[str, Any]]] = {k: list(v) for k, v in answers.items()}
        self._commit = commit
        self._lock = asyncio.Lock()
        self._tool_runs: dict[str, int] = {}
        self.steps = 0
        """Model request steps begun in this drive."""
        self.replayed = 0
        """Steps answered from the journal in this drive."""
        self.executed = 0
        """Steps run and recorded in this drive."""

    @property
    def turn(self) -> int:
        """The step whose response the tool calls running now answer (``-1`` before any)."""
        return self.steps - 1

    def state(self) -> dict[str, Any]:
        """The row state for the journal as it stands (see the module docstring)."""
        # The same FrozenDict objects every row: the store's delta encoder sees a list that only
        # grew and stores the new entries alone.
        return {
            JOURNAL: list(self._entries),
            ANSWERS: {k: list(v) for k, v in self.answers.items()},
        }

    def begin_model_step(self) -> int:
        """Count one more model request step; returns its number."""
        self.steps += 1
        return self.steps - 1

    def tool_key(self, tool_call_id: str) -> str:
        """The key of this execution of a tool call: a call runs twice when it deferred itself
        (``ApprovalRequired``) and was then approved."""
        base = f"tool:{self.turn}:{tool_call_id}"
        runs = self._tool_runs.get(base, 0)
        self._tool_runs[base] = runs + 1
        return f"{base}:{runs}"

    def answers_for(self, key: str) -> list[Answer]:
        """The answers given so far to the questions asked under ``key``, each bound to the
        ``interrupt()`` it answers (``None`` for an approval, answered by position)."""
        return [Answer.from_dict(a) for a in self.answers.get(key, ())]

    def recorded_model(self, turn: int, messages: int) -> Mapping[str, Any] | None:
        """The entry of the model request of step ``turn``, checked to be the same request.

        Raises:
            ReplayDivergedError: the entry was recorded for a request of another length.
        """
        key = f"model:{turn}"
        entry = self._by_key.get(key)
        if entry is None:
            return None
        if entry.get("messages") != messages:
            raise ReplayDivergedError(
                f"run {self.execution_id!r}: model request {turn} is sent with {messages} "
                f"messages, but the journal recorded it with {entry.get('messages')}; the "
                "agent's code, tools or prompts changed since the run started",
                key=key,
                execution_id=self.execution_id,
                node_id=model_node(turn),
            )
        self.replayed += 1
        return entry

    def recorded_tool(self, key: str, tool: str) -> Mapping[str, Any] | None:
        """The entry of a tool call's execution, checked to be of the same tool.

        Raises:
            ReplayDivergedError: the entry was recorded for another tool.
        """
        entry = self._by_key.get(key)
        if entry is None:
            return None
        if entry.get("tool") != tool:
            raise ReplayDivergedError(
                f"run {self.execution_id!r}: tool call {key} is a call of {tool!r}, but the "
                f"journal recorded a call of {entry.get('tool')!r}; the agent's code or tools "
                "changed since the run started",
                key=key,
                execution_id=self.execution_id,
            )
        self.replayed += 1
        return entry

    async def record(self, entry: dict[str, Any], step: Step) -> None:
        """Add an entry and commit it in the row of ``step``.

        Entries of tool calls that run at once are committed one at a time, in the order they
        finished (one run has one writer).
        """
        async with self._lock:
            frozen = FrozenDict(entry)
            self._entries.append(frozen)
            self._by_key[frozen["key"]] = frozen
            self.executed += 1
            await self._commit(step)
