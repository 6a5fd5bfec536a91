"""Read-only commands: ``runs list``, ``runs show`` and ``pending list``."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from .._stale import lease_lapses_at, staleness
from ..errors import RunNotFoundError
from ..store.base import RunRecord
from ..views import (
    RUN_STATUSES,
    missing_parents,
    pending_json,
    pending_state,
    run_json,
    run_note,
    runner_filter,
    runner_label,
    timeline,
)
from ._app import open_store, store_options
from ._render import (
    compact,
    diff_markup,
    emit_json,
    out,
    styled_label,
    styled_status,
    when,
)

#: Ids are copied into the next command, so their column never wraps or truncates.
ID_COLUMN: dict[str, Any] = {"no_wrap": True, "overflow": "ignore", "min_width": 32}


def run_status_markup(run: RunRecord) -> str:
    """A run's status for a table cell: ``stale`` for a ``running`` run nothing executes."""
    return "[bold red]stale[/]" if staleness(run) is not None else styled_status(run.status)


@click.group("runs")
def runs_group() -> None:
    """List and inspect runs."""


@runs_group.command("list")
@click.option("--status", type=click.Choice(RUN_STATUSES), help="Only runs in this status.")
@click.option(
    "--name",
    "runner_name",
    metavar="RUNNER",
    help="Only runs of this runner ('orders' or 'chain:orders').",
)
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@store_options
def runs_list(
    status: str | None, runner_name: str | None, limit: int, db_url: str, as_json: bool
) -> int:
    """List runs, newest first."""
    store = open_store(db_url)
    try:
        found = store.list_runs(status=status, runner_name=runner_filter(runner_name), limit=limit)
        pruned = missing_parents(store, found)
    finally:
        store.close()
    if as_json:
        emit_json([run_json(r, parent_pruned=r.parent_execution_id in pruned) for r in found])
        return 0
    if not found:
        out.print("[dim]no runs[/]")
        return 0
    table = Table(show_edge=False, header_style="bold")
    table.add_column("execution_id", **ID_COLUMN)
    table.add_column("runner")
    table.add_column("status", no_wrap=True)
    table.add_column("created (UTC)", no_wrap=True)
    table.add_column("updated (UTC)", no_wrap=True)
    table.add_column("note", overflow="fold")
    for run in found:
        note = run_note(run, run.parent_execution_id in pruned)
        table.add_row(
            run.execution_id,
            escape(runner_label(run)),
            run_status_markup(run),
            when(run.created_at),
            when(run.updated_at),
            escape(note if len(note) <= 120 else note[:119] + "…"),
        )
    out.print(table)
    return 0


@runs_group.command("show")
@click.argument("execution_id")
@store_options
def runs_show(execution_id: str, db_url: str, as_json: bool) -> int:
    """Show a run: its checkpoint timeline with state diffs, pending interrupt and
    idempotency cache."""
    store = open_store(db_url)
    try:
        run = store.get_run(execution_id)
        if run is None:
            raise RunNotFoundError(
                f"no run with execution_id {execution_id!r}", execution_id=execution_id
            )
        rows = timeline(run, store.list(execution_id))
        pending = store.get_pending_interrupt(execution_id)
        cache = store.list_idempotent(execution_id)
        parent_pruned = bool(missing_parents(store, [run]))
    finally:
        store.close()
    if as_json:
        emit_json(
            {
                "run": run_json(run, parent_pruned=parent_pruned),
                "checkpoints": rows,
                "pending_interrupt": None if pending is None else pending_json(pending),
                "idempotency": cache,
            }
        )
        return 0
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
    if run.error:
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
    if cache:
        out.print(f"\n[bold]idempotency cache[/] ({len(cache)})")
        for key, value in sorted(cache.items()):
            out.print(f"  {escape(key[:16])}…  {escape(compact(value, 80))}")
    return 0


@click.group("pending")
def pending_group() -> None:
    """Interrupts waiting for a human."""


@pending_group.command("list")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@store_options
def pending_list(limit: int, db_url: str, as_json: bool) -> int:
    """List pending interrupts, oldest first (with the run's error, when a worker left the
    run for code that has its step)."""
    store = open_store(db_url)
    try:
        found = store.list_pending_interrupts(limit=limit)
        runners: dict[str, str | None] = {}
        errors: dict[str, str | None] = {}
        for p in found:
            run = store.get_run(p.execution_id)
            runners[p.execution_id] = run.runner_name if run else None
            errors[p.execution_id] = run.error if run else None
    finally:
        store.close()
    if as_json:
        emit_json(
            [
                {
                    **pending_json(p),
                    "runner_name": runners[p.execution_id],
                    "run_error": errors[p.execution_id],
                }
                for p in found
            ]
        )
        return 0
    if not found:
        out.print("[dim]no pending interrupts[/]")
        return 0
    table = Table(show_edge=False, header_style="bold")
    table.add_column("execution_id", **ID_COLUMN)
    # The question's id: `approve`/`reject --checkpoint` bind an answer to it.
    table.add_column("checkpoint_id", **ID_COLUMN)
    for column in ("runner", "node_id", "reason", "state"):
        table.add_column(column)
    table.add_column("since (UTC)", no_wrap=True)
    table.add_column("context", overflow="fold")
    for p in found:
        table.add_row(
            p.execution_id,
            p.checkpoint_id,
            escape(runners[p.execution_id] or "?"),
            escape(p.node_id),
            escape(p.reason),
            pending_state(p),
            when(p.created_at),
            escape(compact(p.context))
            + (
                f"\n[red]{escape(errors[p.execution_id] or '')}[/]"
                if errors[p.execution_id]
                else ""
            ),
        )
    out.print(table)
    return 0


COMMANDS = (runs_group, pending_group)
