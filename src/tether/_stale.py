"""Whether a run that says ``running`` still has a live process behind it, for the CLI and the
web page (``docs/workers.md``, "Leases and heartbeats").

A ``running`` run is **stale** when its lease lapsed (its owner stopped renewing it: the process
died, froze or lost the database), or when its owner is a process on this machine that no
longer exists (a SIGKILLed script, whose lease has not lapsed yet). Either way nothing is
executing it: ``resume`` continues it at once, and a worker takes it over once the lease
lapses. The workers' own takeover rule is SQL in each backend; this is its reading for people.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Literal

from ._lease import DEFAULT_RUN_LEASE_SECONDS, owner_is_dead
from .store.base import RunRecord

__all__ = ["Staleness", "lease_lapses_at", "staleness"]


@dataclass(frozen=True, slots=True)
class Staleness:
    """Why a ``running`` run has no live process.

    Attributes:
        reason: ``"lease_lapsed"`` (no renewal since ``lease_lapsed_at``) or ``"owner_gone"``
            (its owner is a process on this machine that no longer exists).
        lease_lapsed_at: when the lease lapsed or will lapse (UTC); ``None`` when the run
            records no time to reckon it from.
    """

    reason: Literal["lease_lapsed", "owner_gone"]
    lease_lapsed_at: _dt.datetime | None

    def describe(self) -> str:
        """One line for people, e.g. ``"stale (lease lapsed at 2026-05-01 12:00:00 UTC)"``."""
        at = (
            self.lease_lapsed_at.astimezone(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            if self.lease_lapsed_at is not None
            else None
        )
        if self.reason == "lease_lapsed":
            return f"stale (lease lapsed at {at})" if at else "stale (lease lapsed)"
        lapse = f"; its lease lapses at {at}" if at else ""
        return f"stale (its process is gone{lapse})"


def lease_lapses_at(
    run: RunRecord, *, lease_seconds: float = DEFAULT_RUN_LEASE_SECONDS
) -> _dt.datetime | None:
    """When ``run``'s lease lapses (UTC): its renewed ``lease_expires_at``, or, before the
    first renewal, ``lease_seconds`` after its last update, as the workers reckon it."""
    if run.lease_expires_at is not None:
        return run.lease_expires_at
    if run.updated_at is None:
        return None
    return run.updated_at + _dt.timedelta(seconds=lease_seconds)


def staleness(
    run: RunRecord,
    now: _dt.datetime | None = None,
    *,
    lease_seconds: float = DEFAULT_RUN_LEASE_SECONDS,
) -> Staleness | None:
    """Whether ``run`` is a ``running`` run nothing executes.

    Args:
        run: the run as the store returned it.
        now: the time to judge by (default: this machine's clock, UTC). Postgres stamps leases
            with the database's clock, so a skewed machine sees a lapse that much early or late.
        lease_seconds: the lease period assumed for a run whose lease was not renewed yet: it
            lapses that long after its last update (:func:`lease_lapses_at`).

    Returns:
        A :class:`Staleness`, or ``None`` when the run is not ``running`` or a live process
        holds it.
    """
    if run.status != "running":
        return None
    current = now or _dt.datetime.now(_dt.UTC)
    lapses = lease_lapses_at(run, lease_seconds=lease_seconds)
    if lapses is not None and lapses <= current:
        return Staleness("lease_lapsed", lapses)
    if owner_is_dead(run.owner):
        return Staleness("owner_gone", lapses)
    return None
