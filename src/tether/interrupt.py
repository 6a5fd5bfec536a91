"""Suspend a step for a human: :func:`interrupt` and its answer, :class:`Resume`.

First pass, ``interrupt()`` raises :class:`~tether.errors.InterruptSignal`; the executor
records the pending interrupt and the run pauses with no process alive. On resume the step runs
again from its top and the ``interrupt()`` call that asked the question returns the
:class:`Resume` given for it (docs/design.md §5).

This module is the one home of the answer-matching rule (docs/design.md §5): every answer is
bound to the identity of the question it answers, its :class:`InterruptIdentity` ``(reason,
key, occurrence)``, and an ``interrupt()`` call returns only the answer bound to its own
identity. A re-executed step that reaches another question first pauses on it; the answers it
holds stay bound to their questions.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, Final

from ._durations import MAX_DAYS
from .errors import (
    ChainResumeError,
    ConfigurationError,
    InterruptOutsideRunError,
    InterruptSignal,
)

__all__ = ["Resume", "interrupt"]

log = logging.getLogger("tether.interrupt")

ANSWERED_BY: Final = "answered_by"
VIA: Final = "via"
NOTE: Final = "note"
"""The keys of ``Resume.metadata`` an answer's audit entry is built from (:mod:`tether.audit`)."""


def check_answer_metadata(metadata: dict[str, Any]) -> str | None:
    """Why ``metadata``'s audit keys are unusable, or ``None`` when they are fine."""
    for key in (ANSWERED_BY, NOTE, VIA):
        if key in metadata and not (metadata[key] is None or isinstance(metadata[key], str)):
            return f"Resume.metadata[{key!r}] must be a str, got {type(metadata[key]).__name__}"
    return None


@dataclass(frozen=True, slots=True)
class Resume:
    """A human's answer to an interrupt.

    Attributes:
        approved: whether the human approved.
        data: any JSON-able payload, e.g. edited values.
        metadata: free-form JSON-able details. Three keys make the answer's entry in the
            run's audit trail (:mod:`tether.audit`): ``"answered_by"`` (who answered, a
            str), ``"note"`` (a str) and ``"via"`` (a str naming the surface: tether's own are
            ``"cli"``, ``"web"``, ``"api"``, ``"code"`` (the default) and ``"worker"``).
        checkpoint_id: the question this answers: the ``checkpoint_id`` of the pending
            interrupt the human was shown (``result.pending_interrupt["checkpoint_id"]``,
            ``PendingInterrupt.checkpoint_id``). A resume given it is refused with
            :class:`~tether.errors.InterruptChangedError`, nothing claimed, when the run
            waits on another question by then (it was answered elsewhere and moved on); the
            check is part of the claim's own statement. ``None`` answers whatever question
            the run waits on (docs/design.md §5). Not stored with
            the answer.
    """

    approved: bool
    data: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    checkpoint_id: str | None = None

    def __post_init__(self) -> None:
        # Checked here, not when the answer is read back: a malformed answer must be refused
        # before it is claimed and stored, or it would stick to the run.
        if type(self.approved) is not bool:
            raise ChainResumeError(
                f"Resume.approved must be True or False, got {type(self.approved).__name__} "
                f"{self.approved!r}"
            )
        if not isinstance(self.metadata, dict):
            raise ChainResumeError(
                f"Resume.metadata must be a dict, got {type(self.metadata).__name__}"
            )
        if self.checkpoint_id is not None and not (
            isinstance(self.checkpoint_id, str) and self.checkpoint_id
        ):
            raise ChainResumeError(
                "Resume.checkpoint_id must be a non-empty str (the pending interrupt's "
                f"checkpoint_id) or None, got {self.checkpoint_id!r}"
            )
        wrong = check_answer_metadata(self.metadata)
        if wrong is not None:
            raise ChainResumeError(wrong)
        from .serde import dumps  # serde imports nothing from here; local to keep layers clear

        dumps(self.to_dict(), "resume_value")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form stored with the pending interrupt."""
        return {"approved": self.approved, "data": self.data, "metadata": dict(self.metadata)}

    @classmethod
    def from_dict(cls, d: Any) -> Resume:
        """Rebuild from :meth:`to_dict` output (other keys are ignored).

        Raises:
            ChainResumeError: ``d`` is not a stored answer.
        """
        if (
            not isinstance(d, dict)
            or type(d.get("approved")) is not bool
            or not isinstance(d.get("metadata") or {}, dict)
        ):
            raise ChainResumeError(f"stored resume value is malformed: {d!r}")
        return cls(d["approved"], d.get("data"), dict(d.get("metadata") or {}))


@dataclass(frozen=True, slots=True)
class InterruptIdentity:
    """Which question an ``interrupt()`` call asks, within one execution of one step.

    Attributes:
        reason: the ``reason`` given to ``interrupt()``.
        key: the ``key=`` given to ``interrupt()`` (``None`` when none was).
        occurrence: how many calls with this reason and key the step execution made before
            this one (0 for the first), so a step asking one question in a loop is answered
            one round at a time.
    """

    reason: str
    key: str | None
    occurrence: int

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "key": self.key, "occurrence": self.occurrence}

    @classmethod
    def from_dict(cls, d: Any) -> InterruptIdentity:
        """Rebuild from :meth:`to_dict` output.

        Raises:
            ChainResumeError: ``d`` is not a stored identity.
        """
        if (
            not isinstance(d, dict)
            or not isinstance(d.get("reason"), str)
            or not (d.get("key") is None or isinstance(d.get("key"), str))
            or type(d.get("occurrence")) is not int
        ):
            raise ChainResumeError(f"stored interrupt identity is malformed: {d!r}")
        return cls(d["reason"], d["key"], d["occurrence"])

    def __str__(self) -> str:
        key = "" if self.key is None else f", key={self.key!r}"
        return f"interrupt({self.reason!r}{key}) #{self.occurrence + 1}"


_IDENTITY_KEY = "interrupt"
"""Where a stored answer and an interrupted row's ``node_input`` keep an identity."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A stored answer and the question it answers.

    Attributes:
        value: the answer.
        identity: the question it answers; ``None`` for an answer stored by a tether older
            than identities, which answers the ``interrupt()`` call at its position instead.
    """

    value: Resume
    identity: InterruptIdentity | None

    def to_dict(self) -> dict[str, Any]:
        """The stored form: :meth:`Resume.to_dict` plus ``"interrupt"``: the identity (an
        older tether reading it sees a plain answer)."""
        d = self.value.to_dict()
        if self.identity is not None:
            d[_IDENTITY_KEY] = self.identity.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Any) -> Answer:
        """Rebuild from :meth:`to_dict` output, or from a plain stored :class:`Resume`.

        Raises:
            ChainResumeError: ``d`` is not a stored answer.
        """
        identity = None
        if isinstance(d, dict) and _IDENTITY_KEY in d:
            identity = InterruptIdentity.from_dict(d[_IDENTITY_KEY])
        return cls(Resume.from_dict(d), identity)


def stored_answers(node_input: Any) -> list[Answer]:
    """The answers an interrupted row (or a fork's copy of one) keeps for its step."""
    if isinstance(node_input, dict):
        return [Answer.from_dict(a) for a in node_input.get("answers", ())]
    return []


def pending_identity(node_input: Any) -> InterruptIdentity | None:
    """The identity of the question an interrupted row waits on; ``None`` for a row written
    by a tether older than identities (its answers are positional)."""
    if isinstance(node_input, dict) and _IDENTITY_KEY in node_input:
        return InterruptIdentity.from_dict(node_input[_IDENTITY_KEY])
    return None


def answers_with(node_input: Any, value: Resume) -> list[Answer]:
    """The answers a re-entry of an interrupted row's step holds once ``value`` answers the
    row's question: those the row kept, then ``value`` bound to the row's question (replacing
    an earlier answer to that very question, as a fork of a fork may bring)."""
    identity = pending_identity(node_input)
    kept = stored_answers(node_input)
    if identity is not None:
        kept = [a for a in kept if a.identity != identity]
    return [*kept, Answer(value, identity)]


def dump_answers(answers: list[Answer]) -> list[dict[str, Any]]:
    """The stored form of ``answers`` (a row's ``node_input["answers"]``)."""
    return [a.to_dict() for a in answers]


_NONE_USED: set[int] = set()
_NO_IDENTITIES: dict[InterruptIdentity, int] = {}
"""Shared by scopes without answers (almost every step), which never add to them."""


class InterruptScope:
    """The answers available to one execution of one step, and its ``interrupt()`` calls.

    A context manager: inside ``with``, :func:`interrupt` reads this scope.

    Attributes:
        answers: the answers the step holds.
        calls: how many ``interrupt()`` calls the step made so far.
    """

    # A class, not a @contextmanager generator: the executors enter one per step, so it
    # stays cheap when the step holds no answer (almost every step).
    __slots__ = ("_asked", "_by_identity", "_positional", "_token", "_used", "answers", "calls")

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = answers
        self.calls = 0
        self._token: Token[InterruptScope | None] | None = None
        self._asked: dict[tuple[str, str | None], int] | None = None
        self._positional = 0
        self._used: set[int] = _NONE_USED
        self._by_identity: dict[InterruptIdentity, int] = _NO_IDENTITIES
        if answers:
            self._used, self._by_identity = set(), {}
            # Answers without identity come from rows of an older tether, where every answer
            # was positional: they form a prefix and keep answering by position.
            while self._positional < len(answers) and answers[self._positional].identity is None:
                self._positional += 1
            for i, answer in enumerate(answers):
                if answer.identity is not None:
                    self._by_identity.setdefault(answer.identity, i)

    def __enter__(self) -> InterruptScope:
        self._token = _scope.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _scope.reset(self._token)
            self._token = None

    def ask(
        self,
        reason: str,
        context: Any,
        key: str | None,
        deadline: dict[str, Any] | None = None,
    ) -> Resume:
        """Answer the next ``interrupt()`` call, or raise the signal that pauses the step."""
        index = self.calls
        self.calls += 1
        if self._asked is None:
            self._asked = {}
        occurrence = self._asked.get((reason, key), 0)
        self._asked[reason, key] = occurrence + 1
        identity = InterruptIdentity(reason, key, occurrence)
        if index < self._positional:
            self._used.add(index)
            return self.answers[index].value
        found = self._by_identity.get(identity)
        if found is not None:
            self._used.add(found)
            return self.answers[found].value
        raise InterruptSignal(
            reason, context, index=index, key=key, occurrence=occurrence, deadline=deadline
        )

    def paused_input(self, sig: InterruptSignal) -> dict[str, Any]:
        """The ``node_input`` entries of the row that records a pause at ``sig``: every answer
        the step holds (each still bound to its question, whether this execution reached it
        or not), the question asked, and the call's position."""
        out = {
            "answers": dump_answers(self.answers),
            "interrupt_index": sig.index,
            _IDENTITY_KEY: InterruptIdentity(sig.reason, sig.key, sig.occurrence).to_dict(),
        }
        if getattr(sig, "deadline", None) is not None:
            out[DEADLINE_KEY] = sig.deadline
        return out

    def unused(self, execution_id: str, node_id: str) -> list[dict[str, Any]] | None:
        """The answers this step execution held and never returned, as stored on the row
        that commits the step (``node_output["unused_answers"]``), or ``None``.

        Such an answer was given for a question the re-executed step no longer asked; it is
        never handed to another question. Logged as a warning on ``tether.interrupt``.
        """
        left = [a for i, a in enumerate(self.answers) if i not in self._used]
        if not left:
            return None
        asked = ", ".join(str(a.identity or "a positional answer") for a in left)
        log.warning(
            "run %s: step %s committed without asking %s again; the answer given for it was "
            "not used",
            execution_id,
            node_id,
            asked,
        )
        return dump_answers(left)


_scope: ContextVar[InterruptScope | None] = ContextVar("tether_interrupt_scope", default=None)


def interrupt_scope(answers: list[Answer]) -> InterruptScope:
    """A scope holding a copy of ``answers``, to enter with ``with``."""
    return InterruptScope(list(answers))


def interrupt(
    reason: str,
    context: Any = None,
    *,
    key: str | None = None,
    timeout_seconds: float | None = None,
    on_timeout: Resume | str | None = None,
) -> Resume:
    """Ask a human; returns their :class:`Resume` when the step is re-entered with one.

    The answer is bound to the question's identity: ``reason``, ``key`` and how many times the
    step asked that reason and key before (docs/design.md §5). A
    re-executed step whose calls come in another order (``asyncio.gather``, a loop over data
    whose order changed) still gets each answer at the question it was given for; a question
    with no answer yet pauses the run, never takes another question's answer.

    Args:
        reason: a short machine-readable reason, e.g. ``"manager_approval"``.
        context: what the human approves: JSON-able data (see :mod:`tether.serde`), frozen at
            suspend time and never recomputed.
        key: tells apart questions that share a reason within one step, e.g. the item id in a
            loop over items whose order may change between executions.
        timeout_seconds: an approval deadline: if nobody answers within this many seconds of
            the pause, a worker serving the run's runner applies ``on_timeout`` (no other
            process need be alive); more than 0 and at most 36500 days. docs/design.md §12,
            "Approval deadlines".
        on_timeout: what the deadline does: a :class:`Resume` (the default answer, recorded
            in the audit trail as given by the deadline, and the run continues), ``"fail"``
            (the run ends ``failed`` with ``ApprovalTimeout``; default) or ``"cancel"`` (the
            run is cancelled). Only with ``timeout_seconds``.

    Returns:
        The answer given for this question, on resume.

    Raises:
        InterruptSignal: the question has no answer yet (a ``BaseException``: do not catch
            it); the executor turns it into a paused run.
        ConfigurationError: ``reason`` is not a str, ``key`` is not a str or ``None``, or the
            deadline's arguments are not as described.
        InterruptOutsideRunError: no step of a run is executing (a node called directly, e.g.
            in a unit test); :func:`tether.testing.run_node` runs one with answers.
    """
    if not isinstance(reason, str):
        raise ConfigurationError(f"interrupt() reason must be a str, got {type(reason).__name__}")
    if key is not None and not isinstance(key, str):
        raise ConfigurationError(
            f"interrupt(key=...) must be a str or None, got {type(key).__name__}"
        )
    deadline = _deadline(timeout_seconds, on_timeout)
    scope = _scope.get()
    if scope is None:
        raise InterruptOutsideRunError(
            f"interrupt({reason!r}) was called outside a tether run: no chain node or agent "
            "tool is executing it, so there is nothing to pause. Run it through its Chain or "
            "Agent, or in a test call tether.testing.run_node(node, state, "
            "answers=[Resume(approved=True)]) to run one node with the answers to give it.",
            reason=reason,
        )
    return scope.ask(reason, context, key, deadline)


DEADLINE_KEY = "deadline"
"""The ``node_input`` entry of an interrupted row that holds its question's approval deadline
(read by the store for ``pending_interrupts.due_at`` and by the worker that applies it)."""
ON_TIMEOUT_ACTIONS = ("fail", "cancel")
_MAX_TIMEOUT_SECONDS: Final = MAX_DAYS * 86400


def _deadline(timeout_seconds: Any, on_timeout: Any) -> dict[str, Any] | None:
    """The deadline entry of ``interrupt()``'s arguments, checked."""
    if timeout_seconds is None:
        if on_timeout is not None:
            raise ConfigurationError("interrupt(on_timeout=...) needs timeout_seconds=")
        return None
    if (
        isinstance(timeout_seconds, bool)
        or not isinstance(timeout_seconds, int | float)
        or not 0 < timeout_seconds <= _MAX_TIMEOUT_SECONDS  # past it, no date holds the due time
    ):
        raise ConfigurationError(
            f"interrupt(timeout_seconds=...) must be a number of seconds > 0 and at most "
            f"{MAX_DAYS} days, got {timeout_seconds!r}"
        )
    action: Any
    if on_timeout is None or on_timeout in ON_TIMEOUT_ACTIONS:
        action = on_timeout or "fail"
    elif isinstance(on_timeout, Resume):
        action = {"resume": on_timeout.to_dict()}
    else:
        raise ConfigurationError(
            "interrupt(on_timeout=...) must be a Resume (the default answer), 'fail' or "
            f"'cancel', got {on_timeout!r}"
        )
    return {"timeout_seconds": float(timeout_seconds), "on_timeout": action}


def check_resume_value(value: Any) -> Resume | None:
    """Validate a caller's ``resume_value``.

    Raises:
        ChainResumeError: it is neither ``None`` nor a :class:`Resume`.
    """
    if value is None or isinstance(value, Resume):
        return value
    raise ChainResumeError(
        f"resume_value must be a tether.Resume (e.g. Resume(approved=True)), "
        f"got {type(value).__name__}"
    )
