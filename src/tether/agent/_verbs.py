"""The verbs every composite runner (``Swarm``, ``Supervisor``) shares: ``arun``/``run``,
``aresume``/``resume``, ``afork``/``fork`` (docs/design.md §1, §4, §9)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..engine.sync import run_sync
from ..errors import ConfigurationError
from ..interrupt import Resume
from ..llm.messages import Message
from ..result import AgentResult
from . import _compose

if TYPE_CHECKING:
    from ..engine.nesting import ReEntry
    from ..store.base import Checkpointer


class CompositeVerbs:
    """The public verbs, over a subclass's ``nested`` run."""

    name: str
    kind: str
    claim_lease_seconds: float
    _checkpointer: Checkpointer | None

    @property
    def segment(self) -> str:
        """This runner's ``agent_path`` segment: ``<kind>:<name>``."""
        return f"{self.kind}:{self.name}"

    @property
    def checkpointer(self) -> Checkpointer:
        """The store (opened on first use when none was given)."""
        if self._checkpointer is None:
            from ..connect import connect

            self._checkpointer = connect()
        return self._checkpointer

    async def nested(
        self, store: Checkpointer, eid: str, input: Any, reentry: ReEntry | None
    ) -> AgentResult:
        raise NotImplementedError

    async def arun(
        self, input: str | list[Message], *, execution_id: str | None = None
    ) -> AgentResult:
        """Start a run.

        Args:
            input: the user's message, or a starting history (``list[Message]``).
            execution_id: choose the run's id (default: a random 32-hex id).

        Returns:
            An :class:`~tether.AgentResult`: ``completed`` with the final ``output`` text,
            ``paused`` with ``pending_interrupt`` (its ``agent_path`` says which agent asked),
            or ``failed`` with ``error``. A failed run stays resumable.

        Raises:
            ConfigurationError: a bad input, or the execution_id exists already.
            StoreError: the store failed.
        """
        return await _compose.start(self, input, execution_id)

    async def aresume(
        self,
        execution_id: str,
        resume_value: Resume | None = None,
        *,
        agent_path: str | None = None,
    ) -> AgentResult:
        """Continue a run from its newest resumable row, in whichever agent wrote it.

        The enclosing levels re-enter from the frames that row carries: an agent that finished
        earlier in the run is not run again, and a model is not asked again for a step
        (a handoff, a delegation) it already chose.

        Args:
            execution_id: the run.
            resume_value: the answer for a paused run's pending interrupt. It answers that
                interrupt only: an ``interrupt()`` reached later pauses the run again.
            agent_path: resume only if the row to re-enter lies in this subtree (e.g.
                ``"supervisor:desk/worker:billing"``): a guard for a caller answering one
                agent's question.

        Raises:
            RunNotFoundError: no such run.
            RunnerMismatchError: the run belongs to another runner.
            ChainResumeError: a paused run was resumed without an answer; or ``agent_path``
                was given without an answer and the run continues outside it.
            AlreadyResumed: the run completed, another caller claimed the interrupt, a
                ``Resume`` was given where nothing is pending, or ``agent_path`` was given with
                an answer and the pending interrupt lies outside it.
            ConfigurationError: the run continues in an agent, worker or tool this code no
                longer has (renamed or removed); nothing was claimed and the interrupt stays
                pending (docs/design.md §5).
        """
        return await _compose.resume(self, execution_id, resume_value, agent_path)

    async def afork(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        resume_value: Resume | None = None,
        new_execution_id: str | None = None,
        state_updates: dict[str, Any] | None = None,
    ) -> AgentResult:
        """Branch a new run from a saved row, in any agent of the run, and run it; the original
        is untouched. The branch's first row is a ``fork_origin`` linked by
        ``parent_checkpoint_id``; the branch ends with its own ``run_end``.

        Args:
            execution_id: the run to branch from (finished, failed, paused or running).
            checkpoint_id: the row to branch from; default: the newest non-tombstone.
            resume_value: when branching from an ``interrupted`` row, the answer the branch
                gives it; without one, the branch pauses at the same question.
            new_execution_id: the branch's id (default: random).
            state_updates: accepted for the runner protocol (the ``tether fork`` command);
                must be empty: an agent's state is its history.

        Raises:
            RunNotFoundError, RunnerMismatchError, CheckpointNotFoundError.
            ChainResumeError: a ``resume_value`` for a row that is not an interrupt.
            ConfigurationError: non-empty ``state_updates``; or the row lies in an agent,
                worker or tool this code no longer has (no branch is created).
        """
        if state_updates:
            raise ConfigurationError(
                f"{self.kind} {self.name!r}: state_updates apply to chains; a {self.kind}'s "
                "state is its conversation (fork from an earlier row instead)"
            )
        return await _compose.fork(
            self, execution_id, checkpoint_id, resume_value, new_execution_id=new_execution_id
        )

    def run(self, input: str | list[Message], *, execution_id: str | None = None) -> AgentResult:
        """Sync twin of :meth:`arun`."""
        return run_sync(self.arun(input, execution_id=execution_id))

    def resume(
        self,
        execution_id: str,
        resume_value: Resume | None = None,
        *,
        agent_path: str | None = None,
    ) -> AgentResult:
        """Sync twin of :meth:`aresume`."""
        return run_sync(self.aresume(execution_id, resume_value, agent_path=agent_path))

    def fork(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        resume_value: Resume | None = None,
        new_execution_id: str | None = None,
        state_updates: dict[str, Any] | None = None,
    ) -> AgentResult:
        """Sync twin of :meth:`afork`."""
        return run_sync(
            self.afork(
                execution_id,
                checkpoint_id,
                resume_value=resume_value,
                new_execution_id=new_execution_id,
                state_updates=state_updates,
            )
        )
