"""Questions a pydantic-ai run pauses on, and how a tether answer resolves them.

A run pauses as a tether interrupt (one pending interrupt per run, docs/design.md §5) when:

- the model calls a tool that needs approval (``requires_approval=True``, or the tool raised
  ``ApprovalRequired``): reason ``tool_approval``;
- a tool deferred itself to be run elsewhere (``CallDeferred``, an external tool): reason
  ``external_tool_call``; ``CallDeferred(kind="question")``: reason ``tool_question``;
- code inside the run called :func:`tether.interrupt`: the reason and context it gave.

The context of the first three is ``{"tool_name", "args", "tool_call_id"}`` (plus
``"metadata"`` when the deferral carried some). Calls deferred in the same model turn are asked
one at a time, in the order the model made them.

A :class:`~tether.Resume` answers them so (docs/pydantic_ai.md, "Approvals"):

========================  ==========================================  =======================
question                  ``approved=True``                           ``approved=False``
========================  ==========================================  =======================
``tool_approval``         the tool runs (``data={"override_args":     the model is told the
                          {...}}`` runs it with those arguments)      call was denied
``external_tool_call``,   ``data`` is the tool's result               the model is told the
``tool_question``                                                     call failed
``interrupt()``           ``interrupt()`` returns the ``Resume``      the same
========================  ==========================================  =======================

A denial's or failure's message is ``data`` when it is a ``str``, else ``metadata["note"]``,
else a default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied

from ...errors import InterruptSignal
from ...interrupt import Resume

TOOL_APPROVAL = "tool_approval"
EXTERNAL_TOOL_CALL = "external_tool_call"
TOOL_QUESTION = "tool_question"
INTERRUPT_MARK = "tether.interrupt"
"""The deferral-metadata key that carries an ``interrupt()`` made inside a tool."""

DENIED = "The tool call was denied by a human."
FAILED = "The tool call was not made: a human declined it."


@dataclass(frozen=True, slots=True)
class Question:
    """What the run pauses on.

    Attributes:
        key: where the answers are kept in the journal (``Journal.answers``).
        index: which answer under ``key`` this question waits for (0 but for a step that
            called ``interrupt()`` more than once).
        reason / context: the pending interrupt's reason and context.
        node_id: the pause row's ``node_id``.
        tool: the tool the question is about, if any.
        tool_call_id: that tool call's id, if any.
        recorded: for an ``interrupt()`` call, what its pause row keeps of it
            (``InterruptScope.paused_input``: every answer the step holds and the identity
            of the question asked); ``None`` for an approval, answered by position.
    """

    key: str
    index: int
    reason: str
    context: Any
    node_id: str
    tool: str | None = None
    tool_call_id: str | None = None
    recorded: dict[str, Any] | None = None


class QuestionSignal(InterruptSignal):
    """The run pauses on :attr:`question` (raised out of pydantic-ai, caught by the drive)."""

    def __init__(self, question: Question) -> None:
        super().__init__(question.reason, question.context, index=question.index)
        self.question = question


def deferred_calls(requests: DeferredToolRequests) -> list[tuple[ToolCallPart, str]]:
    """The deferred calls with their question's reason, approvals first, each in call order."""
    calls = [(c, TOOL_APPROVAL) for c in requests.approvals]
    for call in requests.calls:
        try:
            question = requests.kind(call.tool_call_id) == "question"
        except (AttributeError, ValueError):
            question = False
        calls.append((call, TOOL_QUESTION if question else EXTERNAL_TOOL_CALL))
    return calls


def tool_context(call: ToolCallPart, metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The pending interrupt's context for a deferred tool call."""
    context: dict[str, Any] = {
        "tool_name": call.tool_name,
        "args": call.args_as_dict(),
        "tool_call_id": call.tool_call_id,
    }
    if metadata:
        context["metadata"] = metadata
    return context


def _message(answer: Resume, default: str) -> str:
    if isinstance(answer.data, str) and answer.data:
        return answer.data
    note = answer.metadata.get("note")
    return str(note) if note else default


def resolve(results: DeferredToolResults, call: ToolCallPart, reason: str, answer: Resume) -> None:
    """Put the result ``answer`` gives a deferred call into ``results`` (see the module table)."""
    call_id = call.tool_call_id
    if reason == TOOL_APPROVAL:
        if not answer.approved:
            results.approvals[call_id] = ToolDenied(_message(answer, DENIED))
        elif isinstance(answer.data, dict) and isinstance(answer.data.get("override_args"), dict):
            results.approvals[call_id] = ToolApproved(override_args=answer.data["override_args"])
        else:
            results.approvals[call_id] = ToolApproved()
    elif answer.approved:
        results.calls[call_id] = answer.data
    else:
        results.calls[call_id] = ToolFailed(_message(answer, FAILED))
