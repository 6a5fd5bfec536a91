"""The record of decisions: who answered a run's interrupt, when, how, and with what.

Checkpoints record what a run did; the audit trail records what people (and the processes
acting for them) decided about it (docs/design.md §5, "The audit trail"). Every answer to an
interrupt is one :class:`AuditEntry`, written by the store in the same transaction that stores
the answer, so an answer is never applied without its record and a record never names an
answer that was refused. Entries are kept as long as the run is (``prune`` deletes them with
it) and never change.

One shape for every kind of entry: ``action`` says what happened (``approved`` and
``rejected`` today; a cancel, a state patch or an answer given by a deadline are further
actions of the same shape), ``actor`` who did it, ``via`` through which surface.
"""

from __future__ import annotations

import datetime as _dt
import getpass
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from .checkpoint import Checkpoint
from .interrupt import ANSWERED_BY, NOTE, VIA, Resume, pending_identity

if TYPE_CHECKING:
    from .store.base import PendingInterrupt

__all__ = ["VIAS", "AuditEntry"]

VIAS: Final = ("cli", "web", "api", "code", "worker")
"""The surfaces an action can come through: the ``tether`` CLI, the web page's forms, the
web server's JSON API, a caller in code (``resume(..., Resume(...))``), a worker acting on
its own (an approval deadline)."""

NOTE_MAX_CHARS: Final = 2000
"""The longest note an answer keeps in the audit trail, in characters (every surface)."""
DATA_MAX_BYTES: Final = 64 * 1024
"""The largest ``Resume.data`` an answer from the CLI, the page or the API may carry, in bytes
of compact JSON."""


def oversized_answer(note: str | None, data: Any) -> tuple[str, str] | None:
    """What makes an answer too large to record, or ``None``.

    Returns:
        ``("note", message)`` for a note over :data:`NOTE_MAX_CHARS`, ``("data", message)`` for
        data over :data:`DATA_MAX_BYTES` as compact JSON (``default=str`` for values JSON lacks).
    """
    if note is not None and len(note) > NOTE_MAX_CHARS:
        return "note", f"the note is {len(note)} characters; at most {NOTE_MAX_CHARS}"
    if data is not None:
        size = len(json.dumps(data, separators=(",", ":"), default=str).encode())
        if size > DATA_MAX_BYTES:
            return "data", f"the data is {size} bytes as JSON; at most {DATA_MAX_BYTES}"
    return None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One decision about a run, as the audit trail keeps it.

    Attributes:
        execution_id: the run decided about.
        action: what was decided: ``approved`` or ``rejected`` for an answer.
        via: the surface it came through: one of :data:`VIAS` from tether's own surfaces, or
            what a caller's ``Resume.metadata["via"]`` says.
        actor: who decided: the named user of the web page, ``--by`` or the OS user on the
            CLI, ``Resume.metadata["answered_by"]`` in code; ``None`` when nobody was named
            (the web page's shared token, code that names no one).
        note: the note given with it.
        data: the JSON payload given with it (``Resume.data`` for an answer).
        checkpoint_id: the ``interrupted`` checkpoint whose question was answered.
        interrupt: the question answered: ``{"reason", "key", "occurrence", "node_id",
            "agent_path"}`` (``key`` and ``occurrence`` are ``None`` for a row written before
            question identities).
        at: when the store recorded it (UTC); assigned by the store.
        entry_id: the store's sequence number for it (increasing in the order recorded);
            assigned by the store.
        damaged: ``None``, or for a stored entry a field of which cannot be read (an ``at``
            that is no time: a hand edit, a foreign writer) which fields and why, e.g. ``"at
            unreadable ('yesterday' is not a number of seconds since the epoch)"``; that
            field is ``None`` and the entry is listed with the others (docs/design.md §12,
            "A damaged run").
    """

    execution_id: str
    action: str
    via: str
    actor: str | None = None
    note: str | None = None
    data: Any = None
    checkpoint_id: str | None = None
    interrupt: dict[str, Any] | None = None
    at: _dt.datetime | None = None
    entry_id: int | None = None
    damaged: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON-able shape ``tether runs show --json``, ``tether audit --json`` and
        ``/api/runs/{id}`` print (``at`` stays a datetime; they print it as ISO 8601 UTC)."""
        return {
            "entry_id": self.entry_id,
            "execution_id": self.execution_id,
            "action": self.action,
            "actor": self.actor,
            "via": self.via,
            "at": self.at,
            "note": self.note,
            "data": self.data,
            "checkpoint_id": self.checkpoint_id,
            "interrupt": self.interrupt,
            "damaged": self.damaged,
        }


def os_user() -> str | None:
    """The name of the OS user running this process, or ``None`` when it has none."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (a bare container)
        return None


def answer_metadata(via: str, actor: str | None, note: str | None) -> dict[str, Any]:
    """The ``Resume.metadata`` a surface gives an answer, from which its entry is built."""
    metadata: dict[str, Any] = {VIA: via}
    if actor is not None:
        metadata[ANSWERED_BY] = actor
    if note is not None:
        metadata[NOTE] = note
    return metadata


def answer_entry(
    execution_id: str,
    value: Resume,
    question: Checkpoint | PendingInterrupt,
) -> AuditEntry:
    """The entry that records ``value`` as the answer to ``question``: the ``interrupted``
    checkpoint the run waits on (which knows the question's identity) or its pending
    interrupt (reason and step only).

    ``via``, ``actor`` and ``note`` come from ``value.metadata`` (``via`` defaults to
    ``code``); ``Resume`` checks their types when it is made.
    """
    meta = value.metadata
    identity: dict[str, Any] = {"key": None, "occurrence": None}
    if isinstance(question, Checkpoint):
        found = pending_identity(question.node_input)
        if found is not None:
            identity = {"key": found.key, "occurrence": found.occurrence}
        reason = question.interrupt_reason
    else:
        reason = question.reason
    return AuditEntry(
        execution_id=execution_id,
        action="approved" if value.approved else "rejected",
        via=meta.get(VIA) or "code",
        actor=meta.get(ANSWERED_BY),
        note=meta.get(NOTE),
        data=value.data,
        checkpoint_id=question.checkpoint_id,
        interrupt={
            "reason": reason,
            **identity,
            "node_id": question.node_id,
            "agent_path": question.agent_path,
        },
    )
