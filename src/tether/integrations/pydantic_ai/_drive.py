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

from ... import _lease, _trace, serde
from ..._context import RunContext, agent_path_scope, run_scope
from ..._runner import afork_checkpoint, alatest_resumable, claim, claim_heartbeat, load_run
from ...checkpoint import Checkpoint
from ...errors import AlreadyResumed, CorruptRecordError, InterruptSignal, StoreError
from ...interrupt import (
    Answer,
    InterruptScope,
    answers_with,
    check_resume_value,
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


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


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
        pending = await self.store.arecord_interrupt(
            cp, release_claim_of=self.owner, **_lease.ending(self.eid)
        )
        self.owner = None
        return TetherRunResult("paused", self.eid, pending_interrupt=pending.as_dict())

    async def _fail(self, exc: Exception) -> TetherRunResult[Any]:
        """Write the ``failed`` run-end row; the run stays resumable from its last row."""
        if self.owner is not None:
            await self.store.arelease_claim(self.eid, owner=self.owner)
            self.owner = None
        cp = self._row(
            "run_end",
            "run_end",
            "failed",
            self.journal.turn,
            node_output={"error": _error_text(exc)},
            agent_path=self.path,
        )
        await self.store.aput(
            cp, run_status="failed", error=_error_text(exc), **_lease.ending(self.eid)
        )
        return TetherRunResult("failed", self.eid, error=exc)

    async def _complete(self, result: AgentRunResult[Any]) -> TetherRunResult[Any]:
        try:
            output = to_jsonable_python(result.output)
        except Exception:
            output = repr(result.output)
        cp = self._row(
            "run_end",
            "run_end",
            "completed",
            self.journal.turn,
            node_output={"output": output, "usage": _usage_of(result)},
            agent_path=self.path,
        )
        await self.store.aput(
            cp, run_status="completed", release_claim_of=self.owner, **_lease.ending(self.eid)
        )
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
    value = check_resume_value(resume_value)
    store = runner.checkpointer
    run = await load_run(store, execution_id, runner.name)
    run_input = RunInput.from_json(run.input)
    cp = await alatest_resumable(store, execution_id)
    if cp is None:
        if value is not None:
            raise AlreadyResumed(
                f"run {execution_id!r} has no pending interrupt to answer",
                execution_id=execution_id,
            )
        # Died before its first row committed: run again from the stored input.
        await _lease.mark_running(store, execution_id, run.status)
        return await _Drive(runner, store, execution_id, {}, None).run(run_input, options)
    if cp.status == "interrupted":
        key = _question_key(cp.node_input, execution_id)
        answers, owner = await claim(store, cp, value, lease_seconds=runner.claim_lease_seconds)
        state = _answered(cp.state_snapshot, key, answers)
        return await _Drive(runner, store, execution_id, state, owner).run(run_input, options)
    if value is not None:
        raise AlreadyResumed(
            f"run {execution_id!r} is not paused (latest step {cp.node_id!r} is {cp.status}); "
            "there is no interrupt to answer",
            execution_id=execution_id,
            node_id=cp.node_id,
        )
    await _lease.mark_running(store, execution_id, run.status)
    return await _Drive(runner, store, execution_id, cp.state_snapshot, None).run(
        run_input, options
    )


@_lease.leased_fork
async def fork(
    runner: TetherAgent[Any, Any],
    execution_id: str,
    checkpoint_id: str | None,
    resume_value: Any,
    options: DriveOptions,
    new_execution_id: str,
) -> Any:
    value = check_resume_value(resume_value)
    store = runner.checkpointer
    run = await load_run(store, execution_id, runner.name)
    run_input = RunInput.from_json(run.input)
    src = await afork_checkpoint(store, execution_id, checkpoint_id)
    source: dict[str, Any] = {
        "node_id": src.node_id,
        "status": src.status,
        "node_input": src.node_input,
    }
    if src.step_type == "fork_origin" and isinstance(src.node_input, dict):
        source = dict(src.node_input["source"])
    state = dict(src.state_snapshot)
    if source["status"] == "interrupted" and value is not None:
        key = _question_key(source["node_input"], execution_id)
        # Kept in the fork's first row, so a branch that dies before its next row still has
        # the answer it was given.
        state = _answered(state, key, answers_with(source["node_input"], value))
    elif value is not None:
        raise AlreadyResumed(
            f"checkpoint {src.checkpoint_id!r} is not an interrupt; a fork from it takes no "
            "resume_value",
            execution_id=execution_id,
        )
    eid = await _lease.acreate_branch_run(store, runner, run, src.checkpoint_id, new_execution_id)
    await store.aput(
        Checkpoint(
            execution_id=eid,
            node_id=src.node_id,
            step_type="fork_origin",
            status="completed",
            state_snapshot=state,
            node_index=src.node_index,
            node_input={"forked_from": execution_id, "source": source},
            agent_path=runner.segment,
            parent_checkpoint_id=src.checkpoint_id,
        )
    )
    return await _Drive(runner, store, eid, state, None).run(run_input, options)
