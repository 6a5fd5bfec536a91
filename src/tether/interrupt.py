"""Suspend a step for a human: :func:`interrupt` and its answer, :class:`Resume`.

First pass, ``interrupt()`` raises :class:`~tether.errors.InterruptSignal`; the executor
records the pending interrupt and the run pauses with no process alive. On resume the step runs
again from its top and the same ``interrupt()`` call returns the :class:`Resume` given for it
(DESIGN section 5). Answers are positional within one step execution: a step that calls
``interrupt()`` twice is answered one call at a time, and an answer given for the first call
never answers the second (DESIGN section 4).
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any

from .errors import ChainResumeError, InterruptSignal

__all__ = ["Resume", "interrupt"]


@dataclass(frozen=True, slots=True)
class Resume:
    """A human's answer to an interrupt.

    Attributes:
        approved: whether the human approved.
        data: any JSON-able payload, e.g. edited values.
        metadata: free-form JSON-able details (who answered, a note).
    """

    approved: bool
    data: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)

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
        from .serde import dumps  # serde imports nothing from here; local to keep layers clear

        dumps(self.to_dict(), "resume_value")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form stored with the pending interrupt."""
        return {"approved": self.approved, "data": self.data, "metadata": dict(self.metadata)}

    @classmethod
    def from_dict(cls, d: Any) -> Resume:
        """Rebuild from :meth:`to_dict` output.

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


@dataclass(slots=True)
class InterruptScope:
    """The answers available to one execution of one step, by ``interrupt()`` call order.

    A context manager: inside ``with``, :func:`interrupt` reads this scope.
    """

    answers: list[Resume] = field(default_factory=list)
    calls: int = 0
    _token: Token[InterruptScope | None] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    # A class, not a @contextmanager generator: the executors enter one per step.
    def __enter__(self) -> InterruptScope:
        self._token = _scope.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _scope.reset(self._token)
            self._token = None


_scope: ContextVar[InterruptScope | None] = ContextVar("tether_interrupt_scope", default=None)


def interrupt_scope(answers: list[Resume]) -> InterruptScope:
    """A scope holding a copy of ``answers``, to enter with ``with``."""
    return InterruptScope(list(answers))


def interrupt(reason: str, context: Any = None) -> Resume:
    """Ask a human; returns their :class:`Resume` when the step is re-entered with one.

    Args:
        reason: a short machine-readable reason, e.g. ``"manager_approval"``.
        context: what the human approves: JSON-able data (see :mod:`tether.serde`), frozen at
            suspend time and never recomputed.

    Returns:
        The answer given for this call, on resume.

    Raises:
        InterruptSignal: on first pass (a ``BaseException``: do not catch it); the executor
            turns it into a paused run.
    """
    scope = _scope.get()
    if scope is None:
        raise InterruptSignal(reason, context, index=0)
    index = scope.calls
    scope.calls += 1
    if index < len(scope.answers):
        return scope.answers[index]
    raise InterruptSignal(reason, context, index=index)


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
