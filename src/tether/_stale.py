"""Whether a run that says ``running`` still has a live process behind it, for the CLI and the
web page (``docs/workers.md``, "Leases and heartbeats").

A ``running`` run is **stale** when its lease lapsed (its owner stopped renewing it: the process
died, froze or lost the database), when nobody owns it, or when its owner is a process on this
machine that no longer exists (a SIGKILLed script, whose lease has not lapsed yet). Either
way nothing is executing it: ``resume`` continues it at once, and a worker takes it over once
the lease lapses. The workers' own takeover rule is SQL in each backend; this is its reading
for people.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Literal

from .engine.owners import owner_is_dead
from .store import UNRECORDED_LEASE_SECONDS
from .store.base import RunRecord

__all__ = ["Staleness", "lease_lapses_at", "staleness"]


@dataclass(frozen=True, slots=True)
class Staleness:
    """Why a ``running`` run has no live process.

    Attributes:
        reason: ``"lease_lapsed"`` (no renewal since ``lease_lapsed_at``), ``"owner_gone"``
            (its owner is a process on this machine that no longer exists) or ``"unowned"``
            (no process owns it: a run an older tether left behind).
        lease_lapsed_at: when the lease lapsed or will lapse (UTC); ``None`` when the run
            records no time to reckon it from.
    """

    reason: Literal["lease_lapsed", "owner_gone", "unowned"]
    lease_lapsed_at: _dt.datetime | None

    def describe(self) -> str:
        """One line for people, e.g. ``"stale (lease lapsed at 2026-05-01 12:00:00 UTC)"``."""
        at = (
            self.lease_lapsed_at.astimezone(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            if self.lease_lapsed_at is not None
            else None
        )
        if self.reason == "unowned":
            return "stale (no process owns it)"
        if self.reason == "lease_lapsed":
            return f"stale (lease lapsed at {at})"
        lapse = f"; its lease lapses at {at}" if at else ""
        return f"stale (its process is gone{lapse})"


def lease_lapses_at(run: RunRecord) -> _dt.datetime | None:
    """When ``run``'s lease lapses or lapsed (UTC), by the rule every reader uses
    (``docs/workers.md``): its recorded ``lease_expires_at``; for a run an older tether left
    owned with none, :data:`~tether.store.UNRECORDED_LEASE_SECONDS` after its last
    update; ``None`` for a run nobody owns."""
    if run.lease_expires_at is not None:
        return run.lease_expires_at
    if run.owner is None or run.updated_at is None:
        return None
    try:
        return run.updated_at + _dt.timedelta(seconds=UNRECORDED_LEASE_SECONDS)
    except OverflowError:  # a stored update time in the last seconds of year 9999
        return _dt.datetime.max.replace(tzinfo=_dt.UTC)


def staleness(run: RunRecord, now: _dt.datetime | None = None) -> Staleness | None:
    """Whether ``run`` is a ``running`` run nothing executes.

    Args:
        run: the run as the store returned it.
        now: the time to judge by (default: this machine's clock, UTC). Postgres stamps leases
            with the database's clock, so a skewed machine sees a lapse that much early or late.

    Returns:
        A :class:`Staleness`, or ``None`` when the run is not ``running`` or a live process
        holds it.
    """
    if run.status != "running":
        return None
    current = now or _dt.datetime.now(_dt.UTC)
    if run.owner is None:
        return Staleness("unowned", None)
    lapses = lease_lapses_at(run)
    if lapses is not None and lapses <= current:
        return Staleness("lease_lapsed", lapses)
    if owner_is_dead(run.owner):
        return Staleness("owner_gone", lapses)
    return None
