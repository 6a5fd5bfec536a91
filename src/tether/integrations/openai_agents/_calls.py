"""Journaling of the SDK's model calls and function tool calls (see :mod:`._journal`).

The SDK resolves a model per agent and invokes a function tool through its ``on_invoke_tool``.
tether instruments both in place, on the objects a durable run meets: the models its provider
hands out or its agents hold (``get_response`` gets a journaling twin) and the
:class:`~agents.FunctionTool` objects offered to the model (``on_invoke_tool`` gets a journaling
wrapper). Outside a durable run both pass straight through, so an agent used elsewhere behaves
exactly as before.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from agents import FunctionTool, Model, ModelProvider, ModelResponse
from agents.run import CallModelData, ModelInputData

from ... import _trace
from ...checkpoint import Checkpoint
from ...errors import ExecutionError, InterruptSignal
from ...interrupt import interrupt_scope
from ._codec import dump_output, dump_response, load_output, load_response
from ._journal import PausedAt, Scope, current_journal, current_scope, journal_scope, segment

__all__ = ["JournalMismatchError", "JournalingProvider", "capture_agent", "instrument_model"]

_MARK = "__tether_journaled__"

_calling_agent: ContextVar[Any] = ContextVar("tether_oa_agent", default=None)
_in_model_call: ContextVar[bool] = ContextVar("tether_oa_in_model_call", default=False)


class JournalMismatchError(ExecutionError):
    """A replayed run asked for something other than what its journal recorded (the agents,
    their tools or their order changed since the run started).

    Attributes:
        key: the journal key that disagreed.
    """

    def __init__(self, message: str, *, key: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.key = key


def capture_agent(
    user_filter: Callable[[CallModelData[Any]], Any] | None,
) -> Callable[[CallModelData[Any]], Awaitable[ModelInputData]]:
    """A ``call_model_input_filter`` that notes which agent calls the model next (and
    instruments its model), then applies ``user_filter``.

    The SDK calls the filter in the task that then calls the model, so the agent it notes is
    the one :func:`_journaled_get_response` sees.
    """

    async def capture(data: CallModelData[Any]) -> ModelInputData:
        _calling_agent.set(data.agent)
        if isinstance(data.agent.model, Model):
            instrument_model(data.agent.model)
        if user_filter is None:
            return data.model_data
        out = user_filter(data)
        updated: ModelInputData = await out if isinstance(out, Awaitable) else out
        return updated

    return capture


class JournalingProvider(ModelProvider):
    """Hands out ``inner``'s models, instrumented."""

    def __init__(self, inner: ModelProvider) -> None:
        self.inner = inner

    def get_model(self, model_name: str | None) -> Model:
        return instrument_model(self.inner.get_model(model_name))

    async def aclose(self) -> None:
        await self.inner.aclose()


def instrument_model(model: Model) -> Model:
    """Give ``model`` a journaling ``get_response`` (once; returns ``model``)."""
    if not getattr(model, _MARK, False):
        original = model.get_response
        model.get_response = functools.partial(_journaled_get_response, model, original)  # type: ignore[method-assign]
        setattr(model, _MARK, True)
    return model


def _agent_name(agent: Any) -> str:
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) else "?"


class _SpanView:
    """What tether's model-call span reads off a response: usage and the tools it asked for."""

    def __init__(self, response: ModelResponse) -> None:
        self.usage = response.usage
        self.tool_calls = [i for i in response.output if getattr(i, "type", "") == "function_call"]


async def _journaled_get_response(
    model: Model, original: Callable[..., Awaitable[ModelResponse]], *args: Any, **kwargs: Any
) -> ModelResponse:
    journal = current_journal()
    if journal is None or _in_model_call.get():
        return await original(*args, **kwargs)
    if journal.store_error is not None:
        raise journal.store_error
    tools = kwargs["tools"] if "tools" in kwargs else (args[3] if len(args) > 3 else ())
    for tool in tools or ():
        if isinstance(tool, FunctionTool):
            _instrument_tool(tool)
    scope = current_scope(journal)
    agent = _agent_name(_calling_agent.get())
    key, n = journal.next_model_call(scope)
    recorded = journal.get(key)
    if recorded is not None:
        if recorded.get("agent") != agent:
            raise JournalMismatchError(
                f"run {journal.execution_id!r}: model call {key!r} was made by agent "
                f"{recorded.get('agent')!r} but is now made by {agent!r}; the agents changed "
                "since the run started (fork from an earlier row, or start a new run)",
                key=key,
                execution_id=journal.execution_id,
            )
        response = load_response(recorded["response"], key=key)
        journal.advance(scope)
        return response
    node_id = f"{scope.node}turn:{n}"
    with _trace.llm_call(journal.execution_id, node_id, model) as traced:
        token = _in_model_call.set(True)
        try:
            response = await original(*args, **kwargs)
        finally:
            _in_model_call.reset(token)
        traced.response(_SpanView(response))
    journal.advance(scope)
    await journal.record(
        {"k": key, "agent": agent, "response": dump_response(response)},
        Checkpoint(
            execution_id=journal.execution_id,
            node_id=node_id,
            step_type="llm_call",
            status="completed",
            node_index=n,
            node_input={"key": key, "agent": agent},
            agent_path=f"{scope.path}/{segment('agent', agent)}",
        ),
    )
    return response


def _instrument_tool(tool: FunctionTool) -> None:
    if not isinstance(tool.on_invoke_tool, _JournaledInvoker):
        tool.on_invoke_tool = _JournaledInvoker(tool.on_invoke_tool, tool)


class _JournaledInvoker:
    """A function tool's invoker that journals each call of it made in a durable run.

    It stands in for the SDK's own invoker, which it calls; the SDK's markers and re-binding
    (a copied ``FunctionTool`` re-binds its invoker) reach the wrapped one.
    """

    def __init__(self, inner: Callable[[Any, str], Awaitable[Any]], tool: FunctionTool) -> None:
        self._inner = inner
        self._tool = tool

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and not name.startswith("__agents"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __agents_bind_function_tool__(self, tool: FunctionTool) -> _JournaledInvoker:
        bind = getattr(self._inner, "__agents_bind_function_tool__", None)
        inner = bind(tool) if callable(bind) else self._inner
        return (
            self if inner is self._inner and tool is self._tool else _JournaledInvoker(inner, tool)
        )

    async def __call__(self, ctx: Any, input: str) -> Any:
        journal = current_journal()
        if journal is None:
            return await self._inner(ctx, input)
        if journal.store_error is not None:
            raise journal.store_error
        name = self._tool.name
        call_id = str(getattr(ctx, "tool_call_id", "") or "")
        scope = current_scope(journal)
        n = journal.model_calls(scope) - 1
        key = f"{scope.key}t{n}:{call_id}"
        recorded = journal.get(key)
        if recorded is not None:
            return load_output(recorded["output"], key=key)
        agent = _agent_name(getattr(ctx, "agent", None) or _calling_agent.get())
        node_id = f"{scope.node}turn:{n}/tool:{name}"
        path = f"{scope.path}/{segment('agent', agent)}/{segment('tool', name)}"
        answers = journal.answers(key)
        inside = Scope(f"{key}/", f"{node_id}/", path)
        with (
            journal_scope(journal, inside),
            interrupt_scope(answers) as questions,
            _trace.tool_call(journal.execution_id, node_id, name),
        ):
            try:
                output = await self._inner(ctx, input)
            except InterruptSignal as sig:
                journal.paused_at = PausedAt(
                    key, node_id, path, name, call_id, input, questions.paused_input(sig),
                    sig.reason, sig.context,
                )  # fmt: skip
                raise
        await journal.record(
            {"k": key, "tool": name, "output": dump_output(output, tool=name)},
            Checkpoint(
                execution_id=journal.execution_id,
                node_id=node_id,
                step_type="tool_call",
                status="completed",
                node_index=n,
                node_input={"key": key, "call_id": call_id, "arguments": _arguments(input)},
                agent_path=path,
            ),
        )
        return output


def _arguments(raw: str) -> Any:
    """A tool call's arguments as JSON when they parse, else the raw text."""
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw
