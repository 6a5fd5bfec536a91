"""The agent executor: the tool loop, a checkpoint before every model call and every tool,
and the pause (docs/design.md §2-4, §8). Where a drive starts — a new run, a resume, a fork — is
decided in :mod:`tether.agent._entry`.

Rows an agent writes, all under ``agent_path = <parent>/agent:<name>``:

- ``turn:N`` (``llm_call``, ``completed``): before the Nth model call; state is the history so
  far. ``node_input`` is ``{"reask": k}`` when the call is the kth corrective re-ask of the
  final answer (those calls do not count against ``max_turns``), else ``None``.
- ``turn:N/tool:<name>`` (``tool_call``, ``completed``): before a tool runs, with
  ``node_input = {"tool_call_id", "name", "arguments"}``; agent_path gains ``/tool:<name>``.
- the same node_id as ``hitl_pause`` / ``interrupted`` when the tool called ``interrupt()``.
- ``run_end`` (``completed`` / ``failed``): once per run, by the outermost runner only.

Every state snapshot is ``{"messages": [Message.to_dict()...], "turn": N, "usage":
Usage.to_dict()}``; ``messages`` only ever grows, so a delta-storing backend writes only the
new messages per row. An agent nested in another runner adds ``"outer"``: the enclosing
runners' frames (:mod:`tether.engine.nesting`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import pydantic

from .. import _trace
from .._context import RunContext, agent_path_scope, run_scope
from .._faults import fault
from .._timeouts import bounded
from ..checkpoint import Checkpoint
from ..engine import rows
from ..engine.claim import claim_heartbeat
from ..engine.nesting import (
    OUTER_KEY,
    ChildPaused,
    EndLoop,
    ToolStep,
    outer_frames,
    tool_step_scope,
)
from ..engine.sync import raise_if_cancel_requested
from ..errors import InterruptSignal, StoreError
from ..interrupt import Answer, InterruptScope, interrupt_scope
from ..llm.messages import Message, ToolCall, Usage
from ..result import AgentResult
from ..serde import FrozenDict
from .errors import MaxTurnsExceeded, OutputValidationError
from .tool import ToolArgumentsError

if TYPE_CHECKING:
    from ..store.base import Checkpointer
    from .agent import Agent

MAX_OUTPUT_REASKS = 2
"""How many times a final answer that does not parse into ``output_type`` is sent back."""

DID_NOT_RUN = (
    "Error: tool {name!r} did not run. The run paused for a human at {paused!r} in the same "
    "turn and was resumed there; the other calls of that turn were not dispatched. Call it "
    "again if you still need it."
)
HANDED_OFF = "Error: tool {name!r} did not run: {ended!r} ended this agent's turn first."


@dataclass(slots=True)
class Cursor:
    """Where a drive starts.

    Attributes:
        messages / turn / usage: the state of the row re-entered.
        calls: tool calls of the current turn still to dispatch; when non-empty the drive
            starts in the tool phase of ``turn``.
        reinvoke_first: the first call's pre-tool row exists already (resume): run it without
            writing another.
        skip_siblings: answer every call after the first with :data:`DID_NOT_RUN` (resume of
            an interrupted tool, docs/design.md §4 "Several tools in one turn").
        answers: the answers in scope for the first call's ``interrupt()`` calls.
        claim_owner: the claim on a pending interrupt this drive holds, released by its next
            write.
        write_turn_row: in the model phase, write the ``turn:N`` row first (false when
            re-entering that very row).
        reask: the re-ask number of the model call at ``turn`` (0 for a loop turn).
    """

    messages: list[Message]
    turn: int
    usage: Usage
    calls: list[ToolCall] = field(default_factory=list)
    reinvoke_first: bool = False
    skip_siblings: bool = False
    answers: list[Answer] = field(default_factory=list)
    claim_owner: str | None = None
    write_turn_row: bool = True
    reask: int = 0


def state_of(messages: list[Message], turn: int, usage: Usage) -> dict[str, Any]:
    """The state snapshot of an agent row (see the module docstring)."""
    return {"messages": [m.to_dict() for m in messages], "turn": turn, "usage": usage.to_dict()}


def tool_result_text(value: Any) -> str:
    """A tool's return value as the text of its tool message: a ``str`` as is, anything else
    as JSON (pydantic models and dataclasses by their fields; other non-JSON values by
    ``str``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, pydantic.BaseModel):
        value = value.model_dump(mode="json")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.dumps(value, default=str, ensure_ascii=False)


async def drive(
    agent: Agent,
    store: Checkpointer,
    eid: str,
    cursor: Cursor,
    *,
    outermost: bool = True,
    segment: str | None = None,
) -> AgentResult:
    """Run the tool loop from ``cursor`` until the agent answers, pauses or fails.

    Args:
        agent: the agent.
        store: where the run's rows go.
        eid: the run's id; a parent runner passes its own so the agent's rows join its run.
        cursor: where to start.
        outermost: write the ``run_end`` row. A parent runner (swarm, supervisor, chain node)
            passes ``False``: then no ``run_end`` is written and an exception that escapes the
            loop is re-raised for the parent instead of becoming a ``failed`` result. A pause
            is recorded either way (the agent's own row is the re-entry address).
        segment: the agent's ``agent_path`` segment (default ``agent:<name>``; a supervisor
            writes its loop as ``supervisor:<name>`` and its workers as ``worker:<role>``).

    Returns:
        The :class:`AgentResult`.

    Raises:
        StoreError: the store failed (nothing more is written).
    """
    store = _trace.stamping(store)
    ctx = RunContext(eid, store, agent.name)
    with (
        run_scope(ctx),
        agent_path_scope(segment or f"agent:{agent.name}") as path,
        _trace.run(agent.kind, agent.name, eid),
    ):
        async with claim_heartbeat(store, eid, cursor.claim_owner, agent.claim_lease_seconds):
            return await _Loop(agent, store, eid, path, cursor, outermost).run()


class _Loop:
    """One drive of the tool loop; holds the history as it grows."""

    def __init__(
        self,
        agent: Agent,
        store: Checkpointer,
        eid: str,
        path: str,
        cursor: Cursor,
        outermost: bool,
    ) -> None:
        self.agent = agent
        self.store = store
        self.eid = eid
        self.path = path
        self.cursor = cursor
        self.outermost = outermost
        self.messages = list(cursor.messages)
        self._dicts: list[FrozenDict] = []
        self.turn = cursor.turn
        self.usage = cursor.usage
        self.owner = cursor.claim_owner
        self.node_id = f"turn:{cursor.turn}"
        self.outer = outer_frames()
        # Answers a re-entered tool held and never used, kept by the row that commits it.
        self.unused: list[dict[str, Any]] | None = None

    def _state(self) -> dict[str, Any]:
        # The history only grows: convert each message once and hand the store the same
        # frozen dicts every row, so its delta encoder stores and encodes only the new ones.
        dicts = self._dicts
        if len(dicts) > len(self.messages):
            dicts.clear()
        for m in self.messages[len(dicts) :]:
            dicts.append(FrozenDict(m.to_dict()))
        state = {"messages": list(dicts), "turn": self.turn, "usage": self.usage.to_dict()}
        if self.outer:  # nested: the enclosing runners' frames (see tether.engine.nesting)
            state[OUTER_KEY] = self.outer
        return state

    def _result(self, status: Any, **kw: Any) -> AgentResult:
        return AgentResult(status, self.eid, messages=list(self.messages), usage=self.usage, **kw)

    async def _put(self, cp: Checkpoint, **kw: Any) -> None:
        # The first row after a claimed re-entry commits the answer: it releases the claim.
        if self.unused:
            cp.node_output = {**(cp.node_output or {}), "unused_answers": self.unused}
        await self.store.aput(cp, release_claim_of=self.owner, **kw)
        self.owner = None
        self.unused = None

    async def run(self) -> AgentResult:
        try:
            outcome = await self._loop()
        except StoreError:
            raise
        except Exception as exc:
            if not self.outermost:
                if self.owner is not None:
                    await self.store.arelease_claim(self.eid, owner=self.owner)
                raise
            return await self._fail(exc)
        if isinstance(outcome, AgentResult) and outcome.status == "paused":
            return outcome
        # A loop a tool ended (EndLoop) completes with no final text.
        text, parsed = (None, None) if isinstance(outcome, AgentResult) else outcome
        fault("agent.after_loop")
        if self.outermost:
            end = rows.run_end(
                self.eid,
                "completed",
                state=self._state(),
                node_index=self.turn,
                node_output={"output": text},
                agent_path=self.path,
            )
            await self._put(end, **rows.ends(end))
        return self._result("completed", output=text, parsed=parsed)

    async def _loop(self) -> tuple[str, Any] | AgentResult:
        agent, cur = self.agent, self.cursor
        calls, reinvoke, skip = cur.calls, cur.reinvoke_first, cur.skip_siblings
        write_turn_row, reask = cur.write_turn_row, cur.reask
        answers = cur.answers
        reasks_left = MAX_OUTPUT_REASKS
        specs = [t.spec for t in agent.tools.values()]
        while True:
            raise_if_cancel_requested()  # one a store call's await swallowed stops here
            if calls:
                paused = await self._tools(calls, reinvoke, skip, answers)
                if paused is not None:
                    return paused
                calls, reinvoke, skip, answers = [], False, False, []
                self.turn += 1
                reask, write_turn_row = 0, True
            self.node_id = f"turn:{self.turn}"
            if write_turn_row:
                await self._put_turn({"reask": reask} if reask else None)
            write_turn_row = True
            if not reask and self.turn >= agent.max_turns:
                raise MaxTurnsExceeded(
                    f"agent {agent.name!r} reached max_turns={agent.max_turns} model calls "
                    "while the model still asked for tools",
                    max_turns=agent.max_turns,
                    execution_id=self.eid,
                    node_id=self.node_id,
                )
            fault("agent.before_llm")
            with _trace.llm_call(self.eid, self.node_id, agent.llm) as traced:
                response = await bounded(
                    agent.llm.acomplete,
                    (self.messages, specs),
                    timeout_seconds=getattr(agent, "model_timeout_seconds", None),
                    step=f"model call of agent {agent.name!r}",
                    execution_id=self.eid,
                    node_id=self.node_id,
                )
                traced.response(response)
            fault("agent.after_llm")
            self.usage = self.usage + response.usage
            self.messages.append(response.to_message())
            if response.tool_calls:
                calls = list(response.tool_calls)
                continue
            text = response.text or ""
            try:
                parsed = self._parse(text)
            except OutputValidationError as exc:
                self.messages.append(Message.user(self._correction(exc)))
                self.turn += 1
                reask += 1
                if reasks_left == 0:
                    await self._boundary(reask)
                    raise
                reasks_left -= 1
                continue
            if agent.output_guardrail is not None:
                try:
                    agent.output_guardrail(parsed if agent.output_type is not None else text)
                except Exception as exc:
                    self.messages.append(
                        Message.user(f"Your answer was rejected by a check: {exc}. Answer again.")
                    )
                    self.turn += 1
                    await self._boundary(reask + 1)
                    raise
            return text, parsed

    async def _put_turn(self, node_input: Any) -> None:
        await self._put(
            rows.step(
                self.eid,
                self.node_id,
                "llm_call",
                self._state(),
                node_index=self.turn,
                node_input=node_input,
                agent_path=self.path,
            )
        )

    async def _boundary(self, reask: int) -> None:
        """The turn row one past the loop's last turn, written before a failure after the
        loop, so resume re-asks the model instead of re-running a tool (docs/design.md §4)."""
        self.node_id = f"turn:{self.turn}"
        await self._put_turn({"reask": reask, "after_failure": True})

    def _parse(self, text: str) -> Any:
        output_type = self.agent.output_type
        if output_type is None:
            return None
        body = text.strip()
        if body.startswith("```"):
            body = body.strip("`").removeprefix("json").strip()
        try:
            return output_type.model_validate_json(body)
        except pydantic.ValidationError as exc:
            raise OutputValidationError(
                f"agent {self.agent.name!r}: the final answer does not parse into "
                f"{output_type.__name__}: {exc}",
                output=text,
                errors=str(exc),
                execution_id=self.eid,
                node_id=self.node_id,
            ) from None

    def _correction(self, exc: OutputValidationError) -> str:
        assert self.agent.output_type is not None
        schema = json.dumps(self.agent.output_type.model_json_schema())
        return (
            "Your answer could not be parsed. Reply with only a JSON object matching this "
            f"schema, no other text.\nSchema: {schema}\nProblems: {exc.errors}"
        )

    async def _tools(
        self,
        calls: list[ToolCall],
        reinvoke_first: bool,
        skip_siblings: bool,
        answers: list[Answer],
    ) -> AgentResult | None:
        """Dispatch one turn's calls in order; returns the paused result if one paused (or a
        runner nested in it did), the completed result if one ended the loop (``EndLoop``)."""
        ended: str | None = None
        for index, call in enumerate(calls):
            if (index > 0 and skip_siblings) or ended is not None:
                text = (
                    DID_NOT_RUN.format(name=call.name, paused=calls[0].name)
                    if ended is None
                    else HANDED_OFF.format(name=call.name, ended=ended)
                )
                self.messages.append(Message.tool_result(call.id, text, name=call.name))
                continue
            self.node_id = f"turn:{self.turn}/tool:{call.name}"
            state = self._state()
            tool_input = {
                "tool_call_id": call.id,
                "name": call.name,
                "arguments": self._stored_arguments(call),
            }
            if not (index == 0 and reinvoke_first):
                await self._put(
                    rows.step(
                        self.eid,
                        self.node_id,
                        "tool_call",
                        state,
                        node_index=self.turn,
                        node_input=tool_input,
                        agent_path=f"{self.path}/tool:{call.name}",
                    )
                )
            fault("agent.before_tool")
            with (
                agent_path_scope(f"tool:{call.name}") as tool_path,
                interrupt_scope(answers if index == 0 else []) as scope,
                _trace.tool_call(self.eid, self.node_id, call.name),
                tool_step_scope(
                    ToolStep(self.node_id, tool_input, self.messages, self.turn, self.usage)
                ),
            ):
                try:
                    outcome = await self._invoke(call)
                    if index == 0 and answers:
                        self.unused = scope.unused(self.eid, self.node_id)
                except InterruptSignal as sig:
                    return await self._pause(tool_input, tool_path, scope, sig)
                except ChildPaused as child:
                    # A runner nested in the tool paused and recorded its pause: this loop
                    # stops without writing (its pre-tool row is the way back in).
                    pending = child.result.pending_interrupt
                    return self._result("paused", pending_interrupt=pending)
            fault("agent.after_tool")
            if isinstance(outcome, EndLoop):
                ended, outcome = call.name, outcome.text
            text = outcome
            self.messages.append(Message.tool_result(call.id, text, name=call.name))
        return None if ended is None else self._result("completed")

    def _stored_arguments(self, call: ToolCall) -> dict[str, Any]:
        """The call's arguments as held by the newest assistant message of the history.

        The row's ``node_input`` then shares that very object with its state, and the store
        writes it once (a reference in ``node_input``, see ``tether.store._codec``). Nothing
        mutates it: it sits in a frozen history message. A copy when no message holds them.
        """
        for message in reversed(self._dicts):
            if message.get("role") == "assistant":
                for stored in message.get("tool_calls", ()):
                    if (
                        stored.get("id") == call.id
                        and stored.get("name") == call.name
                        and stored.get("arguments") == call.arguments
                    ):
                        return cast(dict[str, Any], stored["arguments"])
                break
        return dict(call.arguments)

    async def _invoke(self, call: ToolCall) -> str | EndLoop:
        tool = self.agent.tool_named(call.name)
        if tool is None:
            known = ", ".join(sorted(self.agent.tools)) or "none"
            return f"Error: there is no tool named {call.name!r}. Available tools: {known}."
        try:
            result = await tool.ainvoke(call.arguments)
        except ToolArgumentsError as exc:
            return f"Error: {exc.message}"
        return result if isinstance(result, EndLoop) else tool_result_text(result)

    async def _pause(
        self,
        tool_input: dict[str, Any],
        tool_path: str,
        scope: InterruptScope,
        sig: InterruptSignal,
    ) -> AgentResult:
        cp = rows.pause(
            self.eid,
            self.node_id,
            self._state(),
            sig,
            {**tool_input, **scope.paused_input(sig)},
            node_index=self.turn,
            agent_path=tool_path,
        )
        pending = await rows.record_pause(self.store, cp, claim_owner=self.owner)
        self.owner = None
        return self._result("paused", pending_interrupt=pending.as_dict())

    async def _fail(self, exc: Exception) -> AgentResult:
        """Write the ``failed`` run-end row; the run stays resumable from its last row."""
        end = rows.run_end(
            self.eid,
            "failed",
            state=self._state(),
            node_index=self.turn,
            node_output=rows.failure(exc, self.node_id),
            agent_path=self.path,
        )
        await rows.fail_run(self.store, end, claim_owner=self.owner)
        self.owner = None
        return self._result("failed", error=exc)
