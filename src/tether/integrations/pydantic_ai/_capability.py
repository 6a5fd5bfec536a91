"""The pydantic-ai capability a durable drive adds to its agent run: it journals every model
request and tool call, replays the journaled ones, and turns deferred tool calls and
``interrupt()`` into tether pauses.

It hooks in where pydantic-ai's capabilities hook in (innermost, so the agent's own
capabilities run around it on replay as they did live):

- ``wrap_model_request`` numbers the request steps and puts the step's model in a
  :class:`JournalModel`, which answers a journaled step from the journal and records a live
  one; ``prepare_model_request`` does it again for an attempt a hook moved to another model.
  Only the model's I/O is journaled: hooks such as history processors run on replay as they did
  live, and a fallback's failed attempts are not journaled;
- ``wrap_tool_execute`` answers a journaled tool call from the journal and records a live one;
- ``handle_deferred_tool_calls`` answers deferred calls from the answers given so far, and
  pauses the run on the first that has none (:mod:`._questions`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.capabilities import (
    AbstractCapability,
    CapabilityOrdering,
    ValidatedToolArgs,
    WrapModelRequestHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.exceptions import CallDeferred
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models import (
    CompletedStreamedResponse,
    Model,
    ModelRequestContext,
    ModelRequestParameters,
    StreamedResponse,
)
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, RunContext, ToolDefinition

from ... import _trace
from ...errors import InterruptSignal
from ...interrupt import interrupt_scope
from . import _codec
from ._journal import Journal, Step, model_node, tool_node
from ._questions import (
    INTERRUPT_MARK,
    Question,
    QuestionSignal,
    deferred_calls,
    resolve,
    tool_context,
)


@dataclass(frozen=True, slots=True)
class _TracedResponse:
    """What tether's model-call span reads from a response."""

    usage: Any
    tool_calls: list[Any] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _ToolName:
    name: str


def _traced(response: ModelResponse) -> _TracedResponse:
    return _TracedResponse(response.usage, [_ToolName(c.tool_name) for c in response.tool_calls])


class JournalModel(WrapperModel):
    """The model serving one attempt of request step ``turn``: answers from the journal when
    the step is in it, else sends the request and journals the response."""

    def __init__(self, wrapped: Model, journal: Journal, turn: int) -> None:
        super().__init__(wrapped)
        self._journal = journal
        self.turn = turn

    def _recorded(self, messages: list[ModelMessage]) -> ModelResponse | None:
        entry = self._journal.recorded_model(self.turn, len(messages))
        return None if entry is None else _codec.load_response(entry["response"])

    async def _record(self, messages: list[ModelMessage], response: ModelResponse) -> None:
        entry = {
            "key": f"model:{self.turn}",
            "messages": len(messages),
            "response": _codec.dump_response(response),
        }
        await self._journal.record(entry, Step(model_node(self.turn), "llm_call", self.turn))

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        recorded = self._recorded(messages)
        if recorded is not None:
            return recorded
        eid, node_id = self._journal.execution_id, model_node(self.turn)
        with _trace.llm_call(eid, node_id, self.wrapped) as traced:
            response = await self.wrapped.request(
                messages, model_settings, model_request_parameters
            )
            traced.response(_traced(response))
        await self._record(messages, response)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        recorded = self._recorded(messages)
        if recorded is not None:
            # Its events reached the stream's consumer in the drive that ran it.
            yield CompletedStreamedResponse(
                recorded, model_request_parameters=model_request_parameters
            )
            return
        eid, node_id = self._journal.execution_id, model_node(self.turn)
        with _trace.llm_call(eid, node_id, self.wrapped) as traced:
            async with self.wrapped.request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream:
                yield stream
            response = stream.get()
            traced.response(_traced(response))
        await self._record(messages, response)


class JournalCapability(AbstractCapability[Any]):
    """The capability one drive adds to its agent run (see the module docstring).

    Args:
        journal: the drive's journal.
    """

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._turn: int | None = None

    def get_ordering(self) -> CapabilityOrdering:
        return CapabilityOrdering(position="innermost")

    def _journaled(self, model: Model) -> Model:
        assert self._turn is not None
        if isinstance(model, JournalModel):
            if model.turn == self._turn:
                return model
            model = model.wrapped
        return JournalModel(model, self._journal, self._turn)

    async def wrap_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        handler: WrapModelRequestHandler,
    ) -> ModelResponse:
        self._turn = self._journal.begin_model_step()
        request_context.model = self._journaled(request_context.model)
        return await handler(request_context)

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        # Per attempt (pydantic-ai versions that have the hook): an attempt a hook moved to
        # another model (a fallback) is journaled under the same step.
        if self._turn is not None:
            request_context.model = self._journaled(request_context.model)
        return request_context

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        journal, name = self._journal, call.tool_name
        key = journal.tool_key(call.tool_call_id)
        entry = journal.recorded_tool(key, name)
        if entry is not None:
            return _codec.replay_outcome(entry["outcome"])
        turn = journal.turn
        node_id = tool_node(turn, name)
        with (
            interrupt_scope(journal.answers_for(key)) as questions,
            _trace.tool_call(journal.execution_id, node_id, name),
        ):
            try:
                value = await handler(args)
            except InterruptSignal as sig:
                # Paused inside the tool: defer the call, so the calls beside it finish and are
                # journaled first; the deferral handler then pauses the run, and on resume the
                # tool runs again from its top with the answer (nothing of it is journaled).
                mark = {"key": key, "reason": sig.reason, "index": sig.index}
                mark["context"] = sig.context
                mark["recorded"] = questions.paused_input(sig)
                raise CallDeferred({INTERRUPT_MARK: mark}) from None
            except _codec.CONTROL_FLOW as signal:
                await self._record_tool(key, turn, call, _codec.outcome_of_signal(signal, name))
                raise
        await self._record_tool(key, turn, call, _codec.outcome_of_value(value, name))
        return value

    async def _record_tool(
        self, key: str, turn: int, call: ToolCallPart, outcome: _codec.ToolOutcome
    ) -> None:
        name = call.tool_name
        node_input = {
            "tool_call_id": call.tool_call_id,
            "name": name,
            "arguments": call.args_as_dict(),
        }
        entry = {"key": key, "tool": name, "outcome": outcome}
        await self._journal.record(
            entry, Step(tool_node(turn, name), "tool_call", turn, tool=name, node_input=node_input)
        )

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[Any], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        journal, turn = self._journal, self._journal.turn
        results = DeferredToolResults()
        for call, reason in deferred_calls(requests):
            metadata = requests.metadata.get(call.tool_call_id)
            node_id = tool_node(turn, call.tool_name)
            mark = (metadata or {}).get(INTERRUPT_MARK)
            if isinstance(mark, dict):
                raise QuestionSignal(
                    Question(
                        mark["key"],
                        int(mark["index"]),
                        str(mark["reason"]),
                        mark["context"],
                        node_id,
                        call.tool_name,
                        call.tool_call_id,
                        mark.get("recorded"),
                    )
                )
            key = f"ask:{turn}:{call.tool_call_id}"
            answers = journal.answers_for(key)
            if not answers:
                context = tool_context(call, metadata)
                raise QuestionSignal(
                    Question(key, 0, reason, context, node_id, call.tool_name, call.tool_call_id)
                )
            resolve(results, call, reason, answers[0].value)
        return results
