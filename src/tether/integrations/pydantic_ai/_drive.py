"""One drive of a durable pydantic-ai run: where it starts (a new run, a resume, a fork) and
the rows it writes (docs/pydantic_ai.md).

Every drive runs the agent from its start with the run's stored input and the journal of the
row it starts from; steps in the journal are answered from it (:mod:`._capability`). Rows, all
under ``agent_path = pydantic_ai:<name>``:

- ``turn:<s>`` (``llm_call``, ``completed``): model request ``s`` answered;
- ``turn:<s>/tool:<name>`` (``tool_call``, ``completed``): a tool call the response of step
  ``s`` asked for returned (``node_input = {"tool_call_id", "name", "arguments"}``; agent_path
  gains ``/tool:<name>``);
- ``turn:<s>/tool:<name>`` or ``turn:<s>`` (``hitl_pause``, ``interrupted``): the run paused on a
  question (:mod:`._questions`), ``node_input = {"question", "answers", "interrupt_index",
  "tool_name", "tool_call_id"}``;
- ``run_end`` (``completed`` with ``node_output = {"output", "usage"}``, or ``failed``).

Each row's state is the journal (:mod:`._journal`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.run import AgentRunResult
from pydantic_core import to_jsonable_python

from ... import _trace, serde
from ..._context import RunContext, agent_path_scope, run_scope
from ...checkpoint import Checkpoint
from ...engine import lease as _lease
from ...engine import rows
from ...engine.claim import claim, claim_heartbeat
from ...engine.fork import ForkPoint, leased_fork
from ...errors import CorruptRecordError, InterruptSignal, StoreError
from ...hooks import arecord_pause
from ...interrupt import (
    Answer,
    InterruptScope,
    answers_with,
    interrupt_scope,
)
from ...store.base import Checkpointer, RunRecord
from ._capability import JournalCapability
from ._input import RunInput
from ._journal import ANSWERS, RUN_QUESTIONS, Journal, Step, model_node
from ._questions import Question, QuestionSignal
from .result import TetherRunResult

if TYPE_CHECKING:
    from .agent import TetherAgent


@dataclass(frozen=True, slots=True)
class DriveOptions:
    """What a drive is given besides the stored input: ``Agent.run``'s ``deps`` and
    ``event_stream_handler`` (code and connections, never stored)."""

    deps: Any = None
    event_stream_handler: EventStreamHandler[Any] | None = None


@dataclass(frozen=True, slots=True)
class StartArgs:
    """A new run's input and this drive's options."""

    run_input: RunInput
    options: DriveOptions


def _usage_of(result: AgentRunResult[Any]) -> dict[str, int]:
    usage: Any = result.usage
    if not hasattr(usage, "requests"):  # a method before pydantic-ai made it a property
        usage = usage()
    return {
        "requests": int(getattr(usage, "requests", 0)),
        "input_tokens": int(getattr(usage, "input_tokens", 0)),
        "output_tokens": int(getattr(usage, "output_tokens", 0)),
    }


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    """The exception a task group's failure stands for: a store error first (the drive must
    stop writing), then a pause, then the first other error."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    for kind in (StoreError, InterruptSignal):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    return leaves[0] if leaves else group


class _Drive:
    """One drive: runs the agent under a journal and writes the run's rows."""

    def __init__(
        self,
        runner: TetherAgent[Any, Any],
        store: Checkpointer,
        eid: str,
        state: dict[str, Any],
        owner: str | None,
    ) -> None:
        self.runner = runner
        self.store = _trace.stamping(store)
        self.eid = eid
        self.owner = owner
        self.path = runner.segment
        self.journal = Journal(state, self._commit, eid)

    def _row(self, node_id: str, step_type: str, status: str, turn: int, **kw: Any) -> Checkpoint:
        return Checkpoint(
            execution_id=self.eid,
            node_id=node_id,
            step_type=step_type,
            status=status,
            state_snapshot=self.journal.state(),
            node_index=max(turn, 0),
            **kw,
        )

    async def _commit(self, step: Step) -> None:
        path = self.path if step.tool is None else f"{self.path}/tool:{step.tool}"
        cp = self._row(
            step.node_id,
            step.step_type,
            "completed",
            step.turn,
            node_input=step.node_input,
            agent_path=path,
        )
        # The first row after a claimed answer commits it: it releases the claim.
        await self.store.aput(cp, release_claim_of=self.owner)
        self.owner = None

    async def run(self, run_input: RunInput, options: DriveOptions) -> TetherRunResult[Any]:
        runner = self.runner
        ctx = RunContext(self.eid, self.store, runner.name)
        with (
            run_scope(ctx),
            agent_path_scope(runner.segment),
            _trace.run(runner.kind, runner.name, self.eid),
        ):
            async with claim_heartbeat(
                self.store, self.eid, self.owner, runner.claim_lease_seconds
            ):
                questions: InterruptScope | None = None
                try:
                    with interrupt_scope(self.journal.answers_for(RUN_QUESTIONS)) as questions:
                        result = await runner.wrapped.run(
                            **run_input.run_kwargs(),
                            deps=options.deps,
                            event_stream_handler=options.event_stream_handler,
                            capabilities=[JournalCapability(self.journal)],
                            infer_name=False,
                        )
                except BaseExceptionGroup as group:
                    leaf = _first(group)
                    if not isinstance(leaf, Exception | InterruptSignal) or isinstance(
                        leaf, StoreError
                    ):
                        raise
                    return await self._ended_by(leaf, questions)
                except StoreError:
                    raise
                except (Exception, InterruptSignal) as exc:
                    return await self._ended_by(exc, questions)
                return await self._complete(result)

    async def _ended_by(
        self, exc: BaseException, questions: InterruptScope | None
    ) -> TetherRunResult[Any]:
        if isinstance(exc, QuestionSignal):
            return await self._pause(exc.question)
        if isinstance(exc, InterruptSignal) and questions is not None:
            # interrupt() outside any tool: answered by position over the whole drive.
            turn = self.journal.turn
            question = Question(
                RUN_QUESTIONS,
                exc.index,
                exc.reason,
                exc.context,
                model_node(max(turn, 0)),
                recorded=questions.paused_input(exc),
            )
            return await self._pause(question)
        assert isinstance(exc, Exception)
        return await self._fail(exc)

    async def _pause(self, q: Question) -> TetherRunResult[Any]:
        # Frozen as JSON now: what the human approves is never recomputed.
        context = serde.from_jsonable(serde.loads(serde.dumps(q.context, "interrupt context")))
        recorded = q.recorded
        if recorded is None:
            earlier = self.journal.answers.get(q.key, [])[: q.index]
            recorded = {"answers": list(earlier), "interrupt_index": q.index}
        path = self.path if q.tool is None else f"{self.path}/tool:{q.tool}"
        cp = self._row(
            q.node_id,
            "hitl_pause",
            "interrupted",
            self.journal.turn,
            node_input={
                "question": q.key,
                **recorded,
                "tool_name": q.tool,
                "tool_call_id": q.tool_call_id,
            },
            interrupt_reason=q.reason,
            interrupt_context=context,
            agent_path=path,
            next_node_id=q.node_id,
        )
        pending = await arecord_pause(
            self.store, cp, release_claim_of=self.owner, **_lease.ending(self.eid)
        )
        self.owner = None
        return TetherRunResult("paused", self.eid, pending_interrupt=pending.as_dict())

    async def _fail(self, exc: Exception) -> TetherRunResult[Any]:
        """Write the ``failed`` run-end row; the run stays resumable from its last row."""
        end = rows.run_end(
            self.eid,
            "failed",
            state=self.journal.state(),
            node_index=max(self.journal.turn, 0),
            node_output=rows.failure(exc),
            agent_path=self.path,
        )
        await rows.fail_run(self.store, end, claim_owner=self.owner)
        self.owner = None
        return TetherRunResult("failed", self.eid, error=exc)

    async def _complete(self, result: AgentRunResult[Any]) -> TetherRunResult[Any]:
        try:
            output = to_jsonable_python(result.output)
        except Exception:
            output = repr(result.output)
        end = rows.run_end(
            self.eid,
            "completed",
            state=self.journal.state(),
            node_index=max(self.journal.turn, 0),
            node_output={"output": output, "usage": _usage_of(result)},
            agent_path=self.path,
        )
        await self.store.aput(end, release_claim_of=self.owner, **rows.ends(end))
        self.owner = None
        return TetherRunResult("completed", self.eid, output=result.output, run_result=result)


def _question_key(node_input: Any, execution_id: str) -> str:
    key = node_input.get("question") if isinstance(node_input, dict) else None
    if not isinstance(key, str):
        raise CorruptRecordError(
            f"run {execution_id!r}: its interrupted row names no question ({node_input!r:.200})",
            execution_id=execution_id,
        )
    return key


def _answered(state: dict[str, Any], key: str, answers: list[Answer]) -> dict[str, Any]:
    """``state`` with ``answers`` as the answers given under ``key``."""
    given = dict(state.get(ANSWERS) or {})
    given[key] = [a.to_dict() for a in answers]
    return {**state, ANSWERS: given}


@_lease.leased_start
async def start(runner: TetherAgent[Any, Any], args: StartArgs, execution_id: str) -> Any:
    store = runner.checkpointer
    await _lease.acreate_run(
        store,
        RunRecord(
            execution_id,
            runner.name,
            runner.kind,
            status="running",
            input=args.run_input.to_json(),
        ),
    )
    return await _Drive(runner, store, execution_id, {}, None).run(args.run_input, args.options)


@_lease.leased_resume
async def resume(
    runner: TetherAgent[Any, Any], execution_id: str, resume_value: Any, options: DriveOptions
) -> Any:
    store = runner.checkpointer
    value, run, cp = await rows.resume_point(store, execution_id, runner.name, resume_value)
    run_input = RunInput.from_json(run.input)
    if cp is None:  # died before its first row committed: run again from the stored input
        await rows.restart_input(store, run, value)
        return await _Drive(runner, store, execution_id, {}, None).run(run_input, options)
    if cp.status == "interrupted":
        key = _question_key(cp.node_input, execution_id)
        answers, owner = await claim(store, cp, value, lease_seconds=runner.claim_lease_seconds)
        state = _answered(cp.state_snapshot, key, answers)
        return await _Drive(runner, store, execution_id, state, owner).run(run_input, options)
    if value is not None:
        raise rows.not_paused(cp)
    await _lease.mark_running(store, execution_id, run.status)
    return await _Drive(runner, store, execution_id, cp.state_snapshot, None).run(
        run_input, options
    )


@leased_fork
async def fork(runner: TetherAgent[Any, Any], point: ForkPoint, options: DriveOptions) -> Any:
    store, value, src, execution_id = point.store, point.value, point.src, point.execution_id
    run_input = RunInput.from_json(point.run.input)
    source = rows.source_of(src)
    state = dict(src.state_snapshot)
    if source["status"] == "interrupted" and value is not None:
        key = _question_key(source["node_input"], execution_id)
        # Kept in the fork's first row, so a branch that dies before its next row still has
        # the answer it was given.
        state = _answered(state, key, answers_with(source["node_input"], value))
    elif value is not None:
        raise rows.not_an_interrupt(src)
    eid = await point.create_branch(runner)
    origin_input = {"forked_from": execution_id, "source": source}
    await store.aput(rows.fork_origin(eid, src, state, origin_input, agent_path=runner.segment))
    return await _Drive(runner, store, eid, state, None).run(run_input, options)
