"""What the CLI and the web page show of runs, shared so both say the same: the JSON shapes of
a run, a pending interrupt and a timeline (``tether ... --json`` and the JSON API print the
same objects), the filters a listing takes, and plain-text renderings (JSON with datetimes as
ISO 8601, one-line previews, table timestamps). No click, no rich, no Starlette: either front
end imports it without the other's extra."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import json
import uuid
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from ._stale import lease_lapses_at, staleness
from ._trace import trace_id_of
from .checkpoint import Checkpoint, run_result
from .errors import CorruptRecordError
from .store import ReadableStore
from .store.base import Checkpointer, PendingInterrupt, RunRecord

__all__ = [
    "RUNNER_KINDS",
    "RUN_STATUSES",
    "compact",
    "missing_parents",
    "pending_json",
    "pending_state",
    "readable_rows",
    "run_detail",
    "run_json",
    "run_note",
    "runner_filter",
    "runner_label",
    "state_diff",
    "status_filter",
    "time_left",
    "time_left_seconds",
    "timeline",
    "to_json",
    "when",
]

RUN_STATUSES = ("queued", "running", "paused", "completed", "failed", "cancelled")
#: The kinds a runner is shown with (``chain:orders``); a filter may spell the name either way.
RUNNER_KINDS = frozenset(
    {"chain", "agent", "swarm", "supervisor", "pydantic_ai", "openai_agents", "langgraph"}
)


def runner_label(run: RunRecord) -> str:
    """A run's runner as lists show it: ``chain:orders`` (``orders`` for a queued run, whose
    kind is not known until a worker starts it)."""
    return f"{run.runner_kind}:{run.runner_name}" if run.runner_kind else run.runner_name


def runner_filter(text: str | None) -> str | None:
    """The runner name a filter names: ``"orders"`` or ``"chain:orders"`` (as lists show it)
    both give ``"orders"``; ``None`` or blank gives ``None`` (no filter)."""
    if text is None or not text.strip():
        return None
    kind, sep, name = text.strip().partition(":")
    return name if sep and kind in RUNNER_KINDS and name else text.strip()


def status_filter(text: str | None) -> str | tuple[str, ...] | None:
    """The statuses a filter names: one (``"paused"``) or several, comma-separated
    (``"running,paused,queued"``, as a tuple); ``None`` or blank gives ``None``.

    Raises:
        ValueError: a name that is not a run status (the message lists those that are).
    """
    if text is None or not text.strip():
        return None
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in RUN_STATUSES]
    if unknown or not names:
        raise ValueError(
            f"unknown run status {', '.join(repr(n) for n in unknown) or repr(text)}; "
            f"use one or more of {', '.join(RUN_STATUSES)}, comma-separated"
        )
    return names[0] if len(names) == 1 else names


def run_json(run: RunRecord, *, parent_pruned: bool = False) -> dict[str, Any]:
    """A run as the JSON object ``runs list`` and ``runs show`` print.

    Besides the run row's fields: ``lease_lapses_at`` (for a ``running`` run, when its lease
    lapses or lapsed, :func:`tether._stale.lease_lapses_at`), ``stale`` (a ``running`` run
    nothing executes, see :mod:`tether._stale`), ``stale_reason`` (``"lease_lapsed"``,
    ``"owner_gone"``, ``"unowned"`` or ``None``),
    ``stale_note`` (the same in words, e.g. ``"stale (lease lapsed at ... UTC)"``) and
    ``parent_pruned`` (a fork whose parent run is no longer in the store) and ``damaged``
    (a listed run whose row could not be fully read: which fields, else ``None``).

    Args:
        run: the run.
        parent_pruned: whether ``run``'s parent was looked up and not found
            (:func:`missing_parents`).
    """
    stale = staleness(run)
    return {
        "execution_id": run.execution_id,
        "runner_name": run.runner_name,
        "runner_kind": run.runner_kind,
        "status": run.status,
        "input": run.input,
        "parent_execution_id": run.parent_execution_id,
        "parent_checkpoint_id": run.parent_checkpoint_id,
        "owner": run.owner,
        "lease_expires_at": run.lease_expires_at,
        "error": run.error,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "finished_at": run.finished_at,
        "app_version": run.app_version,
        "lease_lapses_at": lease_lapses_at(run) if run.status == "running" else None,
        "stale": stale is not None,
        "stale_reason": None if stale is None else stale.reason,
        "stale_note": None if stale is None else stale.describe(),
        "parent_pruned": parent_pruned,
        "damaged": run.damaged,
    }


def missing_parents(store: Checkpointer, runs: Iterable[RunRecord]) -> set[str]:
    """The parents of forks among ``runs`` that the store no longer holds (pruned)."""
    parents = {r.parent_execution_id for r in runs if r.parent_execution_id}
    return {p for p in parents if store.get_run(p) is None}


def run_note(run: RunRecord, parent_pruned: bool) -> str:
    """The "note" a runs table shows: staleness, error, lineage."""
    notes = []
    stale = staleness(run)
    if stale is not None:
        notes.append(stale.describe())
    if run.error:
        notes.append(run.error)
    if run.parent_execution_id:
        pruned = " (parent pruned)" if parent_pruned else ""
        notes.append(f"fork of {run.parent_execution_id}{pruned}")
    return "; ".join(notes)


def pending_json(pending: PendingInterrupt) -> dict[str, Any]:
    """A pending interrupt as JSON; ``state`` is ``waiting``, ``answered`` or ``claimed``."""
    return {
        "execution_id": pending.execution_id,
        "checkpoint_id": pending.checkpoint_id,
        "node_id": pending.node_id,
        "agent_path": pending.agent_path,
        "reason": pending.reason,
        "context": pending.context,
        "created_at": pending.created_at,
        "state": pending_state(pending),
        "claimed_by": pending.claimed_by,
        "claim_expires_at": pending.claim_expires_at,
        "resume_value": pending.resume_value,
        "damaged": pending.damaged,
        "due_at": pending.due_at,
        "time_left_seconds": time_left_seconds(pending),
    }


def time_left_seconds(pending: PendingInterrupt) -> float | None:
    """Seconds until the question's approval deadline (0 once passed; ``None``: none)."""
    if pending.due_at is None:
        return None
    left = (pending.due_at - _dt.datetime.now(_dt.UTC)).total_seconds()
    return round(max(0.0, left), 1)


def time_left(pending: PendingInterrupt) -> str:
    """The time left to answer, in words: ``"12m left"``, ``"due now"``; ``""``: no deadline."""
    left = time_left_seconds(pending)
    if left is None:
        return ""
    if left <= 0:
        return "due now"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if left >= size:
            return f"{int(left // size)}{unit} left"
    return f"{int(left)}s left"


def pending_state(pending: PendingInterrupt) -> str:
    """``waiting`` for an answer, ``answered`` (stored, not yet resumed) or ``claimed``."""
    if pending.claimed_by:
        return "claimed"
    return "waiting" if pending.resume_value is None else "answered"


def timeline(run: RunRecord, checkpoints: list[Checkpoint]) -> list[dict[str, Any]]:
    """Each checkpoint with the key-level diff of its state against the previous row's, its
    ``node_input``/``node_output`` (a tool call's arguments, a run's output or error), and its
    ``label``: what the row records (``"before tool call"``, see :attr:`Checkpoint.label`).

    The first row is compared with the run's input, so it shows what the first step added.
    """
    rows = []
    previous: Any = run.input
    for cp in checkpoints:
        rows.append(
            {
                "seq": cp.seq,
                "checkpoint_id": cp.checkpoint_id,
                "node_id": cp.node_id,
                "step_type": cp.step_type,
                "status": cp.status,
                "label": cp.label,
                "created_at": cp.created_at,
                "agent_path": cp.agent_path,
                "next_node_id": cp.next_node_id,
                "interrupt_reason": cp.interrupt_reason,
                "parent_checkpoint_id": cp.parent_checkpoint_id,
                "node_input": cp.node_input,
                "node_output": cp.node_output,
                "diff": state_diff(previous, cp.state_snapshot),
                "trace_id": trace_id_of(cp),
            }
        )
        previous = cp.state_snapshot
    return rows


def run_detail(
    store: Checkpointer,
    run: RunRecord,
    rows: list[Checkpoint],
    damage: CorruptRecordError | None = None,
) -> dict[str, Any]:
    """Everything about one run, as ``tether runs show --json`` prints it and
    ``/api/runs/{id}`` returns it: ``run`` (:func:`run_json`), ``result`` (a finished run's
    output, or its error and failing node: :func:`tether.checkpoint.run_result`; ``None``
    while it has not ended), ``checkpoints`` (:func:`timeline`), ``pending_interrupt``,
    ``idempotency`` (the cache, ``{key: value}``), ``audit`` (the run's audit trail,
    oldest first: :meth:`tether.audit.AuditEntry.as_dict`) and ``damaged``: ``None``, or for
    a run read as far as its rows decode (:func:`readable_rows`) ``{"seq", "error"}``, the
    first row that cannot be read (it and the rows after it are not in ``checkpoints``).

    Args:
        run: the run.
        rows: its checkpoints (``store.list``, or as far as they read).
        damage: the error naming the first row that could not be read, if any.
    """
    execution_id = run.execution_id
    pending = store.get_pending_interrupt(execution_id)
    return {
        "run": run_json(run, parent_pruned=bool(missing_parents(store, [run]))),
        "result": None if damage is not None else run_result(rows),
        "checkpoints": timeline(run, rows),
        "pending_interrupt": None if pending is None else pending_json(pending),
        "idempotency": store.list_idempotent(execution_id),
        "audit": [entry.as_dict() for entry in store.list_audit(execution_id)],
        "damaged": None if damage is None else {"seq": damage.seq, "error": damage.message},
    }


def readable_rows(
    store: Checkpointer, execution_id: str
) -> tuple[list[Checkpoint], CorruptRecordError | None]:
    """A run's checkpoints for showing it: every row, or for a damaged run (a row that cannot
    be decoded) the rows before the damaged one and the error naming it, on a store that can
    read so (:class:`~tether.store.ReadableStore`: both bundled backends); another store
    raises the error.

    Raises:
        CorruptRecordError: a row cannot be read and the store cannot read around it.
    """
    if isinstance(store, ReadableStore):
        return store.list_readable(execution_id)
    return store.list(execution_id), None


def state_diff(before: Any, after: Any) -> dict[str, list[str]]:
    """Which top-level keys a step added, changed and removed.

    Args:
        before: the state at the previous boundary (a dict; anything else counts as empty).
        after: the state at this boundary.

    Returns:
        ``{"added": [...], "changed": [...], "removed": [...]}``, each list sorted.
    """
    old = before if isinstance(before, dict) else {}
    new = after if isinstance(after, dict) else {}
    changed = []
    for key in new.keys() & old.keys():
        try:
            same = bool(new[key] == old[key])
        except Exception:  # a value whose __eq__ raises counts as changed
            same = False
        if not same:
            changed.append(key)
    return {
        "added": sorted(map(str, new.keys() - old.keys())),
        "changed": sorted(map(str, changed)),
        "removed": sorted(map(str, old.keys() - new.keys())),
    }


def _default(value: Any) -> Any:
    if isinstance(value, _dt.datetime | _dt.date | _dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID | Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    return repr(value)


def to_json(value: Any) -> str:
    """``value`` as indented JSON; datetimes become ISO 8601, other non-JSON values strings."""
    return json.dumps(value, default=_default, indent=2, ensure_ascii=False)


def compact(value: Any, width: int = 60) -> str:
    """A one-line JSON rendering, cut to ``width`` characters."""
    text = json.dumps(value, default=_default, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


def when(value: _dt.datetime | None) -> str:
    """A UTC timestamp for a table cell (``-`` when absent)."""
    if value is None:
        return "-"
    return value.astimezone(_dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
