"""Named fault points for crash tests (test-only; inert unless ``TETHER_FAULT`` is set).

``TETHER_FAULT="chain.after_commit"`` SIGKILLs the process the first time execution reaches
that point; ``"chain.after_commit@3"`` on the third time. Several may be given, separated by
commas. The names are listed in :data:`FAULT_POINTS` and in ``docs/guarantees.md``.

In-process tests may call ``rearm(spec, raise_instead=True)``: the point then raises
:class:`SimulatedCrash` (a ``BaseException`` no executor catches) instead of killing.
"""

from __future__ import annotations

import os
import signal
from typing import Final

FAULT_POINTS: Final = (
    "chain.before_commit",  # a node ran (its side effects happened); its checkpoint did not commit
    "chain.after_commit",  # a node's checkpoint committed; the next node has not started
    "chain.after_claim",  # a resumer claimed the pending interrupt; the node has not re-run
    "idempotent.after_effect",  # an @idempotent body ran; its result is not cached yet
    "idempotent.after_cache",  # an @idempotent result was cached; the node goes on
    "run.before_end",  # every node committed; the run-end row did not
    "agent.before_llm",  # a turn checkpoint committed; the model was not called
    "agent.after_llm",  # the model answered; nothing about the answer committed
    "agent.before_tool",  # a tool's pre-call checkpoint committed; the tool did not run
    "agent.after_tool",  # a tool ran; its result is not in a checkpoint yet
    "agent.after_loop",  # the tool loop ended; the run-end row did not commit
    "agent.after_claim",  # a resumer claimed an agent's (or swarm's, supervisor's) interrupt
)


class SimulatedCrash(BaseException):
    """Raised by an armed fault point in place of SIGKILL (``rearm(..., raise_instead=True)``)."""


def _parse(spec: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, nth = part.partition("@")
        out[name] = int(nth) if nth else 1
    return out


_armed: dict[str, int] = _parse(os.environ.get("TETHER_FAULT", ""))
ARMED: Final = _armed
"""The armed fault points (empty when none is): a hot loop tests it before calling :func:`fault`,
one call less a step. :func:`rearm` changes it in place, so a name imported from here stays
the live one."""
_hits: dict[str, int] = {}
_raise_instead = False


def fault(name: str) -> None:
    """SIGKILL this process if the fault ``name`` is armed and its hit count is reached."""
    if not _armed:
        return
    nth = _armed.get(name)
    if nth is None:
        return
    hits = _hits.get(name, 0) + 1
    _hits[name] = hits
    if hits == nth:
        if _raise_instead:
            raise SimulatedCrash(name)
        os.kill(os.getpid(), signal.SIGKILL)


def rearm(spec: str, *, raise_instead: bool = False) -> None:
    """Arm faults from a spec string (tests in the same process use this); with
    ``raise_instead`` an armed point raises :class:`SimulatedCrash` instead of killing."""
    global _raise_instead
    _armed.clear()
    _armed.update(_parse(spec))
    _raise_instead = raise_instead
    _hits.clear()
