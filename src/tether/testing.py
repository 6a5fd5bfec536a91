"""Test helpers: deterministic model doubles, and one node run with given answers.

:func:`run_node` (and :func:`arun_node`) runs one chain node outside any run, the way a run
would call it, with the answers its ``interrupt()`` calls get::

    done = run_node(review, {"amount": 900}, answers=[Resume(approved=True)])
    assert done.status == "completed" and done.updates == {"approved": True}
    asked = run_node(review, {"amount": 900})
    assert asked.status == "paused" and asked.question.reason == "manager_approval"

:class:`ScriptedLLM` plays back a fixed list of answers; :class:`FunctionLLM` computes each answer
from the history with a plain function. Both satisfy :class:`tether.llm.LLM`, record what they
were asked, and need no SDK or network::

    llm = ScriptedLLM([
        [{"name": "lookup_order", "arguments": {"order_id": "A-1"}}],  # turn 0: call a tool
        "Your order ships tomorrow.",                                  # turn 1: final answer
    ])

An answer may be given as:

- ``str``: a final text answer (``finish_reason="stop"``);
- a list of :class:`~tether.llm.ToolCall` or of dicts ``{"name": str, "arguments": dict,
  "id"?: str}``: tool calls (``finish_reason="tool_calls"``); missing ids are ``call_<n>``,
  numbered from 1 in the order the calls appear, so they are the same in every process;
- an :class:`~tether.llm.LLMResponse`: returned as is.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from tether import serde
from tether._context import current_agent_path
from tether._runner import run_sync
from tether.errors import ConfigurationError, InterruptSignal, TetherError
from tether.interrupt import (
    Answer,
    InterruptIdentity,
    Resume,
    check_resume_value,
    interrupt_scope,
)
from tether.llm.messages import LLMResponse, Message, ToolCall, ToolSpec

Reply: TypeAlias = str | Sequence[ToolCall | Mapping[str, Any]] | LLMResponse
"""One scripted answer: final text, tool calls, or a full response."""

__all__ = [
    "FunctionLLM",
    "NodeRun",
    "Question",
    "Reply",
    "ScriptExhaustedError",
    "ScriptedLLM",
    "arun_node",
    "run_node",
]


@dataclass(frozen=True, slots=True)
class Question:
    """An ``interrupt()`` a node reached with no answer left for it: where a run would pause.

    Attributes:
        reason: the ``reason`` it passed.
        context: the ``context`` it passed, as a run would store it (JSON round-tripped).
        index: which ``interrupt()`` call of the node's last execution it was (0 for the
            first).
        key: the ``key=`` it passed, if any.
    """

    reason: str
    context: Any
    index: int
    key: str | None = None


@dataclass(frozen=True, slots=True)
class NodeRun:
    """What one node did under :func:`run_node`.

    Attributes:
        status: ``"completed"`` (the node returned) or ``"paused"`` (it asked a question no
            answer was given for; a run would pause there and re-run the node from its top).
        updates: what the node returned (a dict of updates, or ``None``); ``None`` when paused.
        state: the state after merging ``updates`` (when paused: the state it was given).
        question: the unanswered question when paused, else ``None``.
        answers_used: how many of the given answers were bound to questions (each one a
            resume, in a run).
    """

    status: Literal["completed", "paused"]
    updates: dict[str, Any] | None
    state: dict[str, Any]
    question: Question | None = None
    answers_used: int = 0


async def arun_node(
    node: Callable[[dict[str, Any]], Any],
    state: Mapping[str, Any] | None = None,
    *,
    answers: Resume | Sequence[Resume] = (),
) -> NodeRun:
    """Run one chain node (sync or ``async def``) outside any run, as a run would call it.

    The node is answered the way a run resumed once per answer answers it (docs/design.md
    §5): it runs from its top; the first question it pauses on gets
    ``answers[0]``, bound to that question's identity (its reason, ``key=`` and occurrence);
    it runs again from its top holding that answer, the next question it pauses on gets
    ``answers[1]``, and so on. A question with no answer left ends it as a pause. Each
    execution gets a fresh copy of ``state``, as a resumed run reads it back from the store.
    Nothing is stored, and ``@idempotent`` functions inside run every time (there is no run to
    cache in). To test a tool that asks, call it from a node:
    ``run_node(lambda s: {"out": refund("A-1", 900)}, {}, answers=[...])``.

    Args:
        node: ``fn(state) -> dict | None``, as given to ``Chain.add_node``.
        state: the state the node is given (default empty).
        answers: one :class:`~tether.Resume` or a list of them, in the order the node's
            questions come up.

    Returns:
        A :class:`NodeRun`: ``completed`` with ``updates`` and the merged ``state``, or
        ``paused`` with the unanswered ``question``.

    Raises:
        ConfigurationError: ``node`` is an Agent, Swarm or Supervisor (run those with their
            own verbs), or it returned something other than a dict or ``None``.
        ChainResumeError: an answer is not a ``Resume``.
        SerializationError: a question's context cannot be stored as JSON (a run would fail
            there too).
        Exception: whatever the node raises, unchanged.
    """
    from tether.chain.graph import RESERVED_NODE_IDS, RUNNER_KINDS, Chain

    if getattr(node, "kind", None) in RUNNER_KINDS:
        raise ConfigurationError(
            "run_node runs a function node; run an Agent, Swarm or Supervisor with its own "
            "run()/resume() (with a ScriptedLLM)"
        )
    given = [answers] if isinstance(answers, Resume) else list(answers)
    for answer in given:
        check_resume_value(answer)
    start = dict(state or {})
    name = str(getattr(node, "__name__", ""))
    node_id = name if name and name not in RESERVED_NODE_IDS and ":" not in name else "node"
    chain = Chain("run_node", checkpointer=None)  # a store is opened only by a run verb
    chain.add_node(node_id, node)
    bound: list[Answer] = []
    while True:
        with interrupt_scope(bound):
            try:
                updates = await chain.call_node(node_id, copy.deepcopy(start))
                break
            except InterruptSignal as sig:
                context = serde.from_jsonable(
                    serde.loads(serde.dumps(sig.context, "interrupt context"))
                )
                if len(bound) == len(given):
                    question = Question(sig.reason, context, sig.index, sig.key)
                    return NodeRun("paused", None, start, question, answers_used=len(bound))
                identity = InterruptIdentity(sig.reason, sig.key, sig.occurrence)
                bound.append(Answer(given[len(bound)], identity))
    merged = {**start, **updates} if updates else start
    return NodeRun("completed", updates, merged, answers_used=len(bound))


def run_node(
    node: Callable[[dict[str, Any]], Any],
    state: Mapping[str, Any] | None = None,
    *,
    answers: Resume | Sequence[Resume] = (),
) -> NodeRun:
    """Sync twin of :func:`arun_node` (an ``async def`` node runs on a loop of its own).

    Raises:
        ConfigurationError: as :func:`arun_node`, or called inside a running event loop
            (``await arun_node(...)`` there).
    """
    return run_sync(arun_node(node, state, answers=answers))


class ScriptExhaustedError(TetherError):
    """A :class:`ScriptedLLM` was asked for more answers than it was given.

    Attributes:
        call_index: the 0-based index of the answer that was asked for.
        script_length: how many answers the script holds.
    """

    def __init__(self, message: str, *, call_index: int, script_length: int) -> None:
        super().__init__(message)
        self.call_index = call_index
        self.script_length = script_length


class _Recorder:
    """What a double was asked: the messages (as dicts) and tool names of every call.

    Each call keeps the (frozen) messages it was given and turns them into dicts only when
    ``calls`` is read, so a long conversation does not cost the double O(history) per turn.
    """

    def __init__(self) -> None:
        self._asked: list[tuple[Message, ...]] = []
        self.tools_offered: list[list[str]] = []

    @property
    def calls(self) -> list[list[dict[str, Any]]]:
        """Every call's messages as :meth:`Message.to_dict` dicts, oldest call first."""
        return [[message.to_dict() for message in asked] for asked in self._asked]

    @property
    def call_count(self) -> int:
        """How many times ``acomplete`` was called."""
        return len(self._asked)

    def _record(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> None:
        self._asked.append(tuple(messages))
        self.tools_offered.append([spec.name for spec in tools])


class ScriptedLLM(_Recorder):
    """A model that returns a fixed list of answers, one per call, in order.

    Args:
        responses: the answers (see the module docstring for the accepted forms).
        resume_aware: pick the answer by the number of assistant messages of the calling
            agent already in the history instead of by call count. A fresh ``ScriptedLLM``
            handed to a resumed run then carries on where the crashed process stopped, instead
            of starting over. The calling agent is the last segment of
            :func:`tether.current_agent_path`; an assistant message signed by another agent
            (``Message.name``, as a ``Swarm`` signs each agent's messages in the conversation
            they share) is not counted, an unsigned one is.

    Attributes:
        calls: every call's messages as :meth:`Message.to_dict` dicts, oldest call first.
        tools_offered: every call's tool names.
        call_count: ``len(calls)``.

    Raises:
        TypeError: on construction, if an answer has an unsupported form.
        ValueError: on construction, if a tool-call answer is empty or lacks a ``name``.
    """

    def __init__(self, responses: Sequence[Reply], *, resume_aware: bool = False) -> None:
        super().__init__()
        if isinstance(responses, str | LLMResponse):
            raise TypeError("ScriptedLLM takes a list of answers; wrap a single answer in [...]")
        self.resume_aware = resume_aware
        self._responses: list[LLMResponse] = []
        next_id = 1
        for reply in responses:
            response, generated = _to_response(reply, first_id=next_id)
            next_id += generated
            self._responses.append(response)

    @property
    def remaining(self) -> int:
        """How many answers are left when indexing by call count."""
        return max(0, len(self._responses) - self.call_count)

    async def acomplete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> LLMResponse:
        """Record the call and return the next scripted answer.

        Raises:
            ScriptExhaustedError: every answer has been used.
        """
        self._record(messages, tools)
        if self.resume_aware:
            me = (current_agent_path() or "").rpartition("/")[2].partition(":")[2]
            index = sum(
                1
                for message in messages
                if message.role == "assistant" and message.name in (None, me)
            )
        else:
            index = self.call_count - 1
        if index >= len(self._responses):
            last = messages[-1].to_dict() if messages else None
            raise ScriptExhaustedError(
                f"ScriptedLLM was asked for answer #{index + 1} but its script holds "
                f"{len(self._responses)}; last message was {last!r}. Add answers to the script.",
                call_index=index,
                script_length=len(self._responses),
            )
        return self._responses[index]


class FunctionLLM(_Recorder):
    """A model whose answer is computed from the history by a function.

    Args:
        fn: called with the history as a ``list[Message]``; returns an answer in any form the
            module docstring lists, directly or as an awaitable. Tool calls without an id get
            ``call_<n>``, numbered on from the tool calls already in the history, so the same
            history always yields the same ids.

    Attributes:
        calls: every call's messages as :meth:`Message.to_dict` dicts, oldest call first.
        tools_offered: every call's tool names.
        call_count: ``len(calls)``.
    """

    def __init__(self, fn: Callable[[list[Message]], Reply | Awaitable[Reply]]) -> None:
        super().__init__()
        self.fn = fn

    async def acomplete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> LLMResponse:
        """Record the call and return ``fn(messages)`` as an :class:`LLMResponse`.

        Raises:
            TypeError: ``fn`` returned an unsupported form.
            ValueError: ``fn`` returned an empty tool-call list or a call without ``name``.
        """
        self._record(messages, tools)
        reply = self.fn(list(messages))
        if inspect.isawaitable(reply):
            reply = await reply
        seen = sum(len(message.tool_calls) for message in messages)
        response, _ = _to_response(reply, first_id=seen + 1)
        return response


def _to_response(reply: Reply, *, first_id: int) -> tuple[LLMResponse, int]:
    """Return the reply as a response, and how many ``call_<n>`` ids were generated."""
    if isinstance(reply, LLMResponse):
        return reply, 0
    if isinstance(reply, str):
        return LLMResponse(text=reply, finish_reason="stop"), 0
    if isinstance(reply, Sequence) and not isinstance(reply, bytes | bytearray):
        if not reply:
            raise ValueError("a tool-call answer must hold at least one call")
        calls: list[ToolCall] = []
        next_id = first_id
        for item in reply:
            if isinstance(item, ToolCall):
                calls.append(item)
                continue
            if not isinstance(item, Mapping):
                raise TypeError(f"a tool call must be a ToolCall or a dict, got {type(item)}")
            name, arguments = item.get("name"), item.get("arguments", {})
            if not isinstance(name, str) or not name:
                raise ValueError(f"a scripted tool call needs a 'name', got {dict(item)!r}")
            if not isinstance(arguments, Mapping):
                raise TypeError(f"tool call {name!r}: 'arguments' must be a dict")
            call_id = item.get("id")
            if call_id is None:
                call_id, next_id = f"call_{next_id}", next_id + 1
            calls.append(ToolCall(id=str(call_id), name=name, arguments=dict(arguments)))
        return LLMResponse(tool_calls=calls, finish_reason="tool_calls"), next_id - first_id
    raise TypeError(
        f"unsupported scripted answer {type(reply).__name__}: give a str, a list of tool calls "
        "or an LLMResponse"
    )
