"""``runs show`` and the JSON shapes of runs and pending interrupts (the list commands are
in :mod:`tether.cli.lists`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from .._stale import lease_lapses_at, staleness
from .._trace import trace_id_of
from ..checkpoint import Checkpoint, run_result
from ..errors import RunNotFoundError
from ..store.base import Checkpointer, PendingInterrupt, RunRecord
from ._app import open_store, store_options
from ._render import (
    compact,
    diff_markup,
    emit_json,
    out,
    state_diff,
    styled_label,
    styled_status,
    when,
)

#: Ids are copied into the next command, so their column never wraps or truncates.
ID_COLUMN: dict[str, Any] = {"no_wrap": True, "overflow": "ignore", "min_width": 32}


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


def run_status_markup(run: RunRecord) -> str:
    """A run's status for a table cell: ``stale`` for a ``running`` run nothing executes."""
    return "[bold red]stale[/]" if staleness(run) is not None else styled_status(run.status)


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
    }


def audit_line(entry: dict[str, Any]) -> str:
    """One audit entry (:meth:`tether.audit.AuditEntry.as_dict`) as a line of markup: when,
    what, who, how, the question and the note."""
    question = entry.get("interrupt") or {}
    about = f" {question.get('reason')!r} at {question.get('node_id')}" if question else ""
    note = f"  note: {entry['note']}" if entry.get("note") else ""
    data = f"  data: {compact(entry['data'], 80)}" if entry.get("data") is not None else ""
    return escape(
        f"{when(entry['at'])}  {entry['action']}{about} by {entry['actor'] or '(not named)'} "
        f"via {entry['via']}{note}{data}"
    )


def pending_state(pending: PendingInterrupt) -> str:
    """``waiting`` for an answer, ``answered`` (stored, not yet resumed) or ``claimed``."""
    if pending.claimed_by:
        return "claimed"
    return "waiting" if pending.resume_value is None else "answered"


@click.group("runs")
def runs_group() -> None:
    """List and inspect runs."""


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


def run_detail(store: Checkpointer, run: RunRecord, rows: list[Checkpoint]) -> dict[str, Any]:
    """Everything about one run, as ``tether runs show --json`` prints it and
    ``/api/runs/{id}`` returns it: ``run`` (:func:`run_json`), ``result`` (a finished run's
    output, or its error and failing node: :func:`tether.checkpoint.run_result`; ``None``
    while it has not ended), ``checkpoints`` (:func:`timeline`), ``pending_interrupt``,
    ``idempotency`` (the cache, ``{key: value}``) and ``audit`` (the run's audit trail,
    oldest first: :meth:`tether.audit.AuditEntry.as_dict`).

    Args:
        run: the run.
        rows: its checkpoints (``store.list``).
    """
    execution_id = run.execution_id
    pending = store.get_pending_interrupt(execution_id)
    return {
        "run": run_json(run, parent_pruned=bool(missing_parents(store, [run]))),
        "result": run_result(rows),
        "checkpoints": timeline(run, rows),
        "pending_interrupt": None if pending is None else pending_json(pending),
        "idempotency": store.list_idempotent(execution_id),
        "audit": [entry.as_dict() for entry in store.list_audit(execution_id)],
    }


@runs_group.command("show")
@click.argument("execution_id")
@store_options
def runs_show(execution_id: str, db_url: str, as_json: bool) -> int:
    """Show a run: its result, checkpoint timeline with state diffs, pending interrupt,
    audit trail (who answered, when, how) and idempotency cache."""
    store = open_store(db_url)
    try:
        run = store.get_run(execution_id)
        if run is None:
            raise RunNotFoundError(
                f"no run with execution_id {execution_id!r}", execution_id=execution_id
            )
        detail = run_detail(store, run, store.list(execution_id))
        pending = store.get_pending_interrupt(execution_id)
    finally:
        store.close()
    if as_json:
        emit_json(detail)
        return 0
    rows, cache, parent_pruned = (
        detail["checkpoints"],
        detail["idempotency"],
        detail["run"]["parent_pruned"],
    )
    stale = staleness(run)
    out.print(
        f"[bold]{run.execution_id}[/]  {escape(run.runner_kind)}:{escape(run.runner_name)}  "
        f"{styled_status(run.status)}"
        + (f"  [bold red]{escape(stale.describe())}[/]" if stale is not None else "")
    )
    out.print(f"created {when(run.created_at)}  updated {when(run.updated_at)}", style="dim")
    if run.parent_execution_id:
        pruned = " (parent pruned)" if parent_pruned else ""
        out.print(f"forked from {run.parent_execution_id} at {run.parent_checkpoint_id}{pruned}")
    if stale is not None:
        out.print(
            f"  nothing executes it: `tether resume {run.execution_id} --app ...` continues "
            "it, or a worker takes it over once its lease lapsed",
            markup=False,
        )
    if run.owner:
        lease = "lapsed at" if stale is not None and stale.reason == "lease_lapsed" else "until"
        out.print(f"owner {escape(run.owner)} (lease {lease} {when(lease_lapses_at(run))})")
    result = detail["result"]
    if result is not None and result["status"] == "completed":
        out.print(f"[green]output[/] {escape(compact(result['output'], 400))}")
    elif result is not None:
        at = result["failed_node_id"]
        out.print(
            f"[red]failed[/]{' at ' + escape(at) if at else ''}: {escape(str(result['error']))}"
        )
    elif run.error:
        out.print(f"[red]error[/] {escape(run.error)}")
    table = Table(title="checkpoints", show_edge=False, header_style="bold", title_justify="left")
    table.add_column("seq", no_wrap=True)
    table.add_column("node_id")
    table.add_column("row", no_wrap=True)
    table.add_column("created (UTC)", no_wrap=True)
    table.add_column("agent_path")
    table.add_column("state diff", overflow="fold")
    traced = any(row["trace_id"] for row in rows)
    if traced:  # tether.otel was on: link each row to its trace
        table.add_column("trace_id", no_wrap=True)
    for row in rows:
        cells = [
            str(row["seq"]),
            escape(row["node_id"]),
            styled_label(row["label"], row["step_type"], row["status"]),
            when(row["created_at"]),
            escape(row["agent_path"] or "-"),
            diff_markup(row["diff"]),
        ]
        table.add_row(*cells, *([row["trace_id"] or "-"] if traced else []))
    out.print(table if rows else "[dim]no checkpoints yet[/]")
    if pending is not None:
        out.print(
            f"\n[bold yellow]pending interrupt[/] at {escape(pending.node_id)} "
            f"({escape(pending.reason)}), {pending_state(pending)} since "
            f"{when(pending.created_at)}, checkpoint {pending.checkpoint_id}"
        )
        out.print(f"  context: {escape(compact(pending.context, 200))}")
        if pending.resume_value is not None:
            out.print(f"  answer:  {escape(compact(pending.resume_value, 200))}")
    if detail["audit"]:
        out.print(f"\n[bold]audit trail[/] ({len(detail['audit'])})")
        for entry in detail["audit"]:
            out.print(f"  {audit_line(entry)}")
    if cache:
        out.print(f"\n[bold]idempotency cache[/] ({len(cache)})")
        for key, value in sorted(cache.items()):
            out.print(f"  {escape(key[:16])}…  {escape(compact(value, 80))}")
    return 0


@click.group("pending")
def pending_group() -> None:
    """Interrupts waiting for a human."""


COMMANDS = (runs_group, pending_group)
