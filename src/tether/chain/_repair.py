"""Repair in place: ``resume(execution_id, state_updates={...})`` continues a failed or crashed
chain run with its state patched, recording the patch as a ``state_patch`` row of its own
(docs/design.md, "Repair: resume with state_updates").

The row is an ordinary completed boundary (its ``next_node_id`` is the step the run continues
at), so everything that reads a run (resume, fork, the timeline) handles it like a node's row;
it commits with the run's return to ``running``, under the resumer's lease, and a
``state_patched`` entry (the updates, the status it repaired) goes to the run's audit trail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import serde
from ..audit import AuditEntry
from ..checkpoint import Checkpoint
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..store.base import Checkpointer, RunRecord
    from .graph import Chain

PATCH_NODE_ID = "state_patch"


@dataclass(slots=True)
class Patched:
    """Where a repaired run continues: the step, the patched state, the cycle counters."""

    node_id: str | None
    state: dict[str, Any]
    counters: dict[str, int]


def check_updates(execution_id: str, state_updates: Any) -> dict[str, Any]:
    """``state_updates`` checked to be a dict of state keys that JSON can store.

    Raises:
        ConfigurationError: not a dict, or a key that is not a non-empty string.
        SerializationError: a value JSON cannot store.
    """
    if not isinstance(state_updates, dict) or not all(
        isinstance(k, str) and k for k in state_updates
    ):
        raise ConfigurationError(
            f"state_updates must be a dict of state keys (non-empty str) to values, got "
            f"{state_updates!r:.80}",
            execution_id=execution_id,
        )
    serde.dumps(state_updates, "state_updates")
    return dict(state_updates)


def refuse_unpatchable(
    execution_id: str, cp: Checkpoint | None, *, answered: bool, agent_path: str | None
) -> None:
    """Refuse, before anything is written, a repair of a run that is not failed or crashed
    between two chain steps.

    Raises:
        ConfigurationError: an answer was given too, the run waits on a question, or it
            stopped inside a runner node (an agent in the chain): fork it with
            ``state_updates`` instead.
    """
    if answered:
        raise ConfigurationError(
            "state_updates repairs a failed or crashed run; pass it without a resume_value "
            "(a paused run takes an answer, or a fork with state_updates)",
            execution_id=execution_id,
        )
    if cp is not None and cp.status == "interrupted":
        raise ConfigurationError(
            f"run {execution_id!r} waits on a question at {cp.node_id!r}: answer it, or fork "
            "it with state_updates (resume's state_updates repairs failed or crashed runs)",
            execution_id=execution_id,
            node_id=cp.node_id,
        )
    if agent_path is not None or (cp is not None and cp.agent_path is not None):
        raise ConfigurationError(
            f"run {execution_id!r} stopped inside a runner node ({cp.agent_path if cp else ''}"
            "): its state is the agent's; fork it with state_updates instead",
            execution_id=execution_id,
        )


async def apatch(
    chain: Chain,
    store: Checkpointer,
    run: RunRecord,
    cp: Checkpoint | None,
    updates: dict[str, Any],
) -> Patched:
    """Write the ``state_patch`` row (and set the run ``running``) and say where the run
    continues. ``cp`` is the run's newest resumable row (``None``: no step committed, so the
    patch applies to its input and the run starts at the entry)."""
    if cp is None:
        base, next_id, counters = dict(run.input or {}), chain.entry, {}
    else:
        base, next_id = cp.state_snapshot, cp.next_node_id
        counters = dict(cp.iteration_counters)
    state = {**base, **updates}
    serde.dumps(state, "state")
    patch = await store.aput(
        Checkpoint(
            execution_id=run.execution_id,
            node_id=PATCH_NODE_ID,
            step_type="state_patch",
            status="completed",
            state_snapshot=state,
            node_index=0 if cp is None else cp.node_index,
            node_input={
                "state_updates": updates,
                "patched_checkpoint_id": None if cp is None else cp.checkpoint_id,
                "status_before": run.status,
            },
            iteration_counters=counters,
            next_node_id=next_id,
        ),
        run_status="running",
    )
    record = getattr(store, "arecord_audit", None)
    if record is not None:  # the bundled stores keep an audit trail
        await record(
            AuditEntry(
                execution_id=run.execution_id,
                action="state_patched",
                via="code",
                data={"state_updates": updates, "status_before": run.status},
                checkpoint_id=patch.checkpoint_id,
            )
        )
    return Patched(next_id, state, counters)
