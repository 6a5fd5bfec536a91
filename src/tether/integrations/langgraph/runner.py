"""``LangGraphRunner``: a compiled LangGraph graph as a tether runner (docs/langgraph.md).

One tether run per LangGraph thread (``execution_id`` = ``thread_id``). The graph's own
checkpoints stay in :class:`~tether.integrations.langgraph.TetherSaver`'s tables; the run's
rows in tether's ``checkpoints`` record only how each drive ended:

- ``<node>`` (``hitl_pause`` / ``interrupted``): the graph paused on an ``interrupt()`` in
  that node (reason ``langgraph.interrupt``; context the interrupt's value, ``node_input =
  {"interrupt_id", "langgraph_checkpoint_id"}``), or stopped with nodes next and no interrupt
  pending, as at a static breakpoint (``interrupt_before`` / ``interrupt_after``; reason
  ``langgraph.breakpoint``, context ``{"next": [...]}``, ``node_input = {"breakpoint": [...],
  "langgraph_checkpoint_id"}``, node the first of them): a run is never ``completed`` while its
  thread has nodes next;
- ``run_end`` (``completed`` with ``node_output = {"output": the graph's values}``, or
  ``failed`` with the error).

What a drive does is read from LangGraph's own state, never guessed (:func:`_next_input`):
an answer is applied only to the question it was given for (docs/design.md §5): the
interrupt the pause row recorded, with ``Command(resume={interrupt_id: answer})``, or the
breakpoint stop it recorded, continued by an approval with ``ainvoke(None)``. An answer whose
question is no longer pending (answered the LangGraph way meanwhile) is not applied anywhere,
and a rejected breakpoint runs nothing: the drive records where the thread stands, pausing
again on what it waits on now. Without an answer to apply, a thread with an interrupt pending
or stopped before an ``interrupt_before`` node pauses again; a thread with steps left
continues (``ainvoke(None)``); a thread with none left completes; a thread without a
checkpoint starts from the run's stored input. So a drive cut short anywhere (a SIGKILL
between LangGraph's commits, or after the graph took an answer but before the run's row
committed) is continued by the next resume or by a worker.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from typing import Any, Literal

from langgraph.types import Command

from ... import serde
from ..._context import RunContext, run_scope
from ...checkpoint import Checkpoint
from ...engine import lease as _lease
from ...engine import rows
from ...engine.claim import DEFAULT_CLAIM_LEASE_SECONDS, claim, claim_heartbeat
from ...engine.sync import run_sync
from ...errors import AlreadyResumed, ConfigurationError, SerializationError, StoreError
from ...interrupt import Resume
from ...store.base import Checkpointer, RunRecord
from .saver import TetherSaver

__all__ = ["LangGraphResult", "LangGraphRunner"]

INTERRUPT_REASON = "langgraph.interrupt"
BREAKPOINT_REASON = "langgraph.breakpoint"

log = logging.getLogger("tether.interrupt")

_STAY: Any = object()
"""A drive's input that runs nothing: record how the thread stands."""


@dataclass(slots=True)
class LangGraphResult:
    """The outcome of a :class:`LangGraphRunner` verb (a tether ``RunOutcome``).

    Attributes:
        status: ``completed``, ``paused`` or ``failed``.
        execution_id: the run's id, which is the LangGraph ``thread_id``.
        output: on completion, the graph's state values (as ``graph.get_state`` gives them).
        pending_interrupt: for a pause, ``{reason, context, node_id, checkpoint_id, ...}``:
            ``context`` is the value the node passed to LangGraph's ``interrupt()`` (reason
            ``langgraph.interrupt``), or ``{"next": [nodes]}`` at a breakpoint (reason
            ``langgraph.breakpoint``).
        error: for a failure, the exception that escaped the graph (also on the run).
    """

    status: Literal["completed", "paused", "failed"]
    execution_id: str
    output: Any = None
    pending_interrupt: dict[str, Any] | None = None
    error: BaseException | None = None

    def raise_for_status(self) -> LangGraphResult:
        """Re-raise the run's error if it failed; return self otherwise."""
        if self.status == "failed" and self.error is not None:
            raise self.error
        return self


class LangGraphRunner:
    """A compiled LangGraph graph whose threads are tether runs.

    Register it in a :class:`~tether.Registry` and a paused thread (a LangGraph
    ``interrupt()``) appears in ``tether pending list``, the approvals page and the API with
    the interrupt's value as context; approving there resumes the graph with
    ``Command(resume={interrupt_id: answer})`` under the run's lease. A thread stopped at a
    static breakpoint (``interrupt_before`` / ``interrupt_after``) appears there too, reason
    ``langgraph.breakpoint`` with context ``{"next": [...]}``: an approval continues it
    (``ainvoke(None)``), a rejection runs nothing and leaves it paused at the same stop. Two
    processes never advance one thread at once (the second gets
    :class:`~tether.errors.AlreadyResumed` or :class:`~tether.errors.LeaseHeldError`);
    ``tether worker`` continues threads whose process died; ``tether prune`` deletes finished
    threads (never paused ones).

    The graph reads an answer given through tether as ``{"approved": bool, "data": ...,
    "metadata": {...}}`` (:meth:`tether.Resume.to_dict`).

    Args:
        graph: a compiled graph whose checkpointer is a :class:`TetherSaver`.
        name: the runner's name, recorded on each run.
        claim_lease_seconds: how long a resumer's claim on a pending interrupt lasts without
            a heartbeat.
        lease_seconds: the run lease of each drive (default tether's, 30 s): how soon a
            worker takes over a thread whose process died (docs/workers.md).

    Raises:
        ConfigurationError: no usable name, or the graph was not compiled with a
            ``TetherSaver``.

    Example::

        graph = builder.compile(checkpointer=TetherSaver.from_url("sqlite:///app.db"))
        support = LangGraphRunner(graph, name="support")
        app = Registry(support)
        result = support.run({"messages": [("user", "Refund A-1")]}, thread_id="A-1")
    """

    kind = "langgraph"

    def __init__(
        self,
        graph: Any,
        *,
        name: str,
        claim_lease_seconds: float = DEFAULT_CLAIM_LEASE_SECONDS,
        lease_seconds: float | None = None,
    ) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise ConfigurationError(
                f"a LangGraphRunner needs a non-empty name without '/', got {name!r}"
            )
        saver = getattr(graph, "checkpointer", None)
        if not isinstance(saver, TetherSaver):
            raise ConfigurationError(
                f"LangGraphRunner({name!r}) needs a graph compiled with a TetherSaver "
                f"(builder.compile(checkpointer=TetherSaver(store))), got {type(saver).__name__}"
            )
        self.name = name
        self.graph = graph
        self.saver = saver
        self.claim_lease_seconds = claim_lease_seconds
        if lease_seconds is not None:
            self.lease_seconds = lease_seconds

    def __repr__(self) -> str:
        return f"LangGraphRunner({self.name!r})"

    @property
    def checkpointer(self) -> Checkpointer:
        """The tether store the graph's saver writes to."""
        return self.saver.store

    # --- verbs ----------------------------------------------------------------------------
    async def arun(
        self, input: Any = None, *, thread_id: str | None = None, execution_id: str | None = None
    ) -> LangGraphResult:
        """Start a thread as a tether run and drive the graph until it ends or pauses.

        Args:
            input: the graph's input (stored with the run, so any process can start it again;
                tether JSON: plain values, dataclasses, pydantic models such as messages).
            thread_id: the LangGraph thread (default: a random id); ``execution_id`` is the
                same thing under tether's name (a worker starting a queued run passes it).

        Raises:
            ConfigurationError: both ids given and different, or the thread exists already.
            SerializationError: an input tether's JSON cannot hold.
        """
        if thread_id is not None and execution_id is not None and thread_id != execution_id:
            raise ConfigurationError("thread_id and execution_id name the same run: give one")
        return await _start(self, input, thread_id or execution_id)  # type: ignore[no-any-return]

    async def aresume(
        self, execution_id: str, resume_value: Resume | None = None
    ) -> LangGraphResult:
        """Continue a thread: answer its interrupt (``Command(resume=...)``), or continue it
        after a crash; under the run's lease.

        Raises:
            RunNotFoundError, RunnerMismatchError: no such run, or another runner's.
            ChainResumeError: a paused thread resumed without an answer.
            AlreadyResumed: the run completed, another caller claimed the interrupt, or an
                answer was given where nothing is pending.
            LeaseHeldError: a live process is driving the thread.
        """
        return await _resume(self, execution_id, resume_value)  # type: ignore[no-any-return]

    async def afork(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        state_updates: dict[str, Any] | None = None,
        resume_value: Resume | None = None,
    ) -> LangGraphResult:
        """Refused: branch a LangGraph thread the LangGraph way (``graph.update_state`` on a
        past checkpoint, or ``TetherSaver.copy_thread``).

        Raises:
            ConfigurationError: always.
        """
        raise ConfigurationError(
            f"LangGraphRunner({self.name!r}): tether's fork does not apply to LangGraph "
            "threads; use LangGraph's time travel (graph.update_state on a past checkpoint) or "
            "TetherSaver.copy_thread"
        )

    def run(
        self, input: Any = None, *, thread_id: str | None = None, execution_id: str | None = None
    ) -> LangGraphResult:
        """Sync twin of :meth:`arun`."""
        return run_sync(self.arun(input, thread_id=thread_id, execution_id=execution_id))

    def resume(self, execution_id: str, resume_value: Resume | None = None) -> LangGraphResult:
        """Sync twin of :meth:`aresume`."""
        return run_sync(self.aresume(execution_id, resume_value))

    def fork(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        state_updates: dict[str, Any] | None = None,
        resume_value: Resume | None = None,
    ) -> LangGraphResult:
        """Refused, as :meth:`afork`."""
        return run_sync(self.afork(execution_id, checkpoint_id))


# --- drives ---------------------------------------------------------------------------------


def _config(eid: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": eid}}


def _pending(snapshot: Any) -> list[tuple[str, Any]]:
    """``(node, Interrupt)`` for every interrupt the thread waits on."""
    return [(task.name, i) for task in snapshot.tasks for i in task.interrupts]


def _checkpoint_id(snapshot: Any) -> str | None:
    return snapshot.config["configurable"].get("checkpoint_id")  # type: ignore[no-any-return]


async def _next_input(
    runner: LangGraphRunner, snapshot: Any, cp: Checkpoint | None, answer: Resume | None
) -> Any:
    """What a resume drives the thread with: the one rule binding a tether answer to the
    LangGraph question it was given for (docs/design.md §5, docs/langgraph.md "Interrupts").

    ``cp`` is the pause row the answer was claimed for. An answer to an interrupt goes to that
    interrupt only (``Command(resume={interrupt_id: answer})``), never to another pending
    beside it; an approval of a breakpoint continues the thread (``None``) while it still
    stands at the stop that was shown; a rejection of one runs nothing (:data:`_STAY`: the
    drive records the stop again). An answer whose question is gone is not applied anywhere:
    the thread is then driven as after a crash (:func:`_without_answer`).
    """
    if answer is None or cp is None:
        return await _without_answer(runner, snapshot)
    asked = cp.node_input if isinstance(cp.node_input, dict) else {}
    pending = _pending(snapshot)
    if "breakpoint" in asked:
        if not pending and _checkpoint_id(snapshot) == asked.get("langgraph_checkpoint_id"):
            return None if answer.approved else _STAY
    elif any(i.id == asked.get("interrupt_id") for _node, i in pending):
        return Command(resume={asked["interrupt_id"]: answer.to_dict()})
    log.warning(
        "run %r: the answer given for %s at %r (checkpoint %s) was not applied: the thread no "
        "longer waits on that question (it was answered or continued the LangGraph way)",
        cp.execution_id,
        cp.interrupt_reason,
        cp.node_id,
        cp.checkpoint_id,
    )
    return await _without_answer(runner, snapshot)


async def _without_answer(runner: LangGraphRunner, snapshot: Any) -> Any:
    """Continue a thread no answer applies to: where it waits on a question (an interrupt, or
    a stop before an ``interrupt_before`` node that LangGraph made, as its own check
    ``should_interrupt`` reads the checkpoint) nothing runs, since ``ainvoke(None)`` would
    pass a breakpoint nobody approved; else it continues (steps left) or its end is recorded."""
    if _pending(snapshot):
        return _STAY
    nodes = runner.graph.interrupt_before_nodes
    if snapshot.next and nodes and (nodes == "*" or set(snapshot.next) & set(nodes)):
        found = await runner.saver.aget_tuple(snapshot.config)
        if found is not None:
            versions: dict[str, Any] = dict(found.checkpoint["channel_versions"])
            seen: dict[str, Any] = found.checkpoint["versions_seen"].get("__interrupt__", {})
            if any(c not in seen or v > seen[c] for c, v in versions.items()):
                return _STAY  # updated since the last stop: LangGraph stopped here
    return None


class _Drive:
    def __init__(self, runner: LangGraphRunner, eid: str, owner: str | None) -> None:
        self.runner = runner
        self.store = runner.checkpointer
        self.eid = eid
        self.owner = owner

    async def run(self, graph_input: Any) -> LangGraphResult:
        graph, config = self.runner.graph, _config(self.eid)
        async with claim_heartbeat(
            self.store, self.eid, self.owner, self.runner.claim_lease_seconds
        ):
            try:
                # The run's context reaches the nodes (LangGraph copies it to the threads it
                # runs sync nodes on), so @idempotent in a node knows its run: a node LangGraph
                # re-executes after an interrupt does not repeat its effects (docs/langgraph.md).
                with run_scope(RunContext(self.eid, self.store, self.runner.name)):
                    if graph_input is not _STAY:
                        await graph.ainvoke(graph_input, config)
                snapshot = await graph.aget_state(config)
            except StoreError:
                raise
            except Exception as exc:
                return await self._fail(exc)
        pending = _pending(snapshot)
        if pending:
            return await self._pause(snapshot, *pending[0])
        if snapshot.next:  # stopped with nodes next: a breakpoint, never an end
            return await self._pause_at_breakpoint(snapshot)
        return await self._complete(snapshot)

    def _row(self, node_id: str, step_type: str, status: str, **kw: Any) -> Checkpoint:
        return Checkpoint(
            execution_id=self.eid,
            node_id=node_id,
            step_type=step_type,
            status=status,
            state_snapshot={},
            node_index=0,
            agent_path=self._path,
            **kw,
        )

    @property
    def _path(self) -> str:
        return f"{LangGraphRunner.kind}:{self.runner.name}"

    async def _pause(self, snapshot: Any, node: str, pending: Any) -> LangGraphResult:
        # Frozen as JSON now: what a person approves is never recomputed.
        context = serde.from_jsonable(serde.loads(serde.dumps(pending.value, "interrupt value")))
        asked = {"interrupt_id": pending.id}
        return await self._record_pause(snapshot, node, asked, INTERRUPT_REASON, context)

    async def _pause_at_breakpoint(self, snapshot: Any) -> LangGraphResult:
        nodes = list(snapshot.next)
        asked, context = {"breakpoint": nodes}, {"next": nodes}
        return await self._record_pause(snapshot, nodes[0], asked, BREAKPOINT_REASON, context)

    async def _record_pause(
        self, snapshot: Any, node: str, asked: dict[str, Any], reason: str, context: Any
    ) -> LangGraphResult:
        cp = self._row(
            node,
            "hitl_pause",
            "interrupted",
            node_input={**asked, "langgraph_checkpoint_id": _checkpoint_id(snapshot)},
            interrupt_reason=reason,
            interrupt_context=context,
            next_node_id=node,
        )
        found = await self.store.arecord_interrupt(
            cp, release_claim_of=self.owner, **_lease.ending(self.eid)
        )
        self.owner = None
        return LangGraphResult("paused", self.eid, pending_interrupt=found.as_dict())

    async def _complete(self, snapshot: Any) -> LangGraphResult:
        values = snapshot.values
        try:
            output = serde.to_jsonable(values, "output")
        except Exception:
            output = repr(values)
        end = rows.run_end(
            self.eid, "completed", node_output={"output": output}, agent_path=self._path
        )
        await self.store.aput(end, release_claim_of=self.owner, **rows.ends(end))
        self.owner = None
        return LangGraphResult("completed", self.eid, output=values)

    async def _fail(self, exc: Exception) -> LangGraphResult:
        """The ``failed`` run-end row; the thread stays resumable from its last checkpoint."""
        end = rows.run_end(self.eid, "failed", node_output=rows.failure(exc), agent_path=self._path)
        await rows.fail_run(self.store, end, claim_owner=self.owner)
        self.owner = None
        return LangGraphResult("failed", self.eid, error=exc)


_INPUT_KEY = "langgraph_input"


def _stored_input(saver: TetherSaver, graph_input: Any) -> Any:
    """The run row's ``input``: plain JSON as given, else the serializer's encoding under
    ``langgraph_input``, so that tools reading the run (``tether runs show``, a worker of
    another app) never need the classes of the graph's values (LangChain's messages)."""
    try:
        plain = serde.TAG.encode() not in serde.dumps(graph_input, "input")
    except SerializationError:
        plain = False
    if plain:
        return graph_input
    type_, payload = saver.serde.dumps_typed(graph_input)
    if type_ == "json":
        return {_INPUT_KEY: {"type": type_, "json": payload.decode()}}
    return {_INPUT_KEY: {"type": type_, "base64": base64.b64encode(payload).decode()}}


def _graph_input(saver: TetherSaver, stored: Any) -> Any:
    """The graph input a run row's ``input`` holds (see :func:`_stored_input`)."""
    if not (isinstance(stored, dict) and set(stored) == {_INPUT_KEY}):
        return stored
    enc = stored[_INPUT_KEY]
    if "json" in enc:
        return saver.serde.loads_typed((enc["type"], enc["json"].encode()))
    return saver.serde.loads_typed((enc["type"], base64.b64decode(enc["base64"])))


@_lease.leased_start
async def _start(runner: LangGraphRunner, graph_input: Any, execution_id: str) -> Any:
    graph_input = _graph_input(runner.saver, graph_input)  # a queued run's, as stored
    stored = _stored_input(runner.saver, graph_input)
    await _lease.acreate_run(
        runner.checkpointer,
        RunRecord(execution_id, runner.name, runner.kind, status="running", input=stored),
    )
    return await _Drive(runner, execution_id, None).run(graph_input)


@_lease.leased_resume
async def _resume(runner: LangGraphRunner, execution_id: str, resume_value: Any) -> Any:
    store = runner.checkpointer
    try:
        value, run, cp = await rows.resume_point(store, execution_id, runner.name, resume_value)
    except AlreadyResumed:  # its hint ("fork it") names a verb this runner refuses
        raise AlreadyResumed(
            f"run {execution_id!r} already completed; branch the thread the LangGraph way "
            "(graph.update_state on a past checkpoint, or TetherSaver.copy_thread)",
            execution_id=execution_id,
        ) from None
    answer: Resume | None = None
    owner: str | None = None
    if cp is not None and cp.status == "interrupted":
        answers, owner = await claim(store, cp, value, lease_seconds=runner.claim_lease_seconds)
        answer = answers[-1].value
    elif value is not None:
        raise AlreadyResumed(
            f"run {execution_id!r} is not paused; there is no interrupt to answer",
            execution_id=execution_id,
        )
    else:
        await _lease.mark_running(store, execution_id, run.status)
    drive = _Drive(runner, execution_id, owner)
    try:
        snapshot = await runner.graph.aget_state(_config(execution_id))
        if not snapshot.created_at:  # no checkpoint yet: died before the first one committed
            graph_input = _graph_input(runner.saver, run.input)
        else:
            graph_input = await _next_input(runner, snapshot, cp, answer)
    except BaseException:
        if owner is not None:
            await store.arelease_claim(execution_id, owner=owner)
        raise
    return await drive.run(graph_input)
