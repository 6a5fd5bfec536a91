"""``runs show`` and ``pending`` (the list commands are in :mod:`tether.cli.lists`; the JSON
shapes of runs and pending interrupts, shared with the web page, in :mod:`tether.views`)."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from .._stale import lease_lapses_at, staleness
from ..errors import RunNotFoundError
from ..store.base import RunRecord
from ..views import (
    pending_state,
    readable_rows,
    run_detail,
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


def audit_line(entry: dict[str, Any]) -> str:
    """One audit entry (:meth:`tether.audit.AuditEntry.as_dict`) as a line of markup: when,
    what, who, how, the question and the note."""
    question = entry.get("interrupt") or {}
    about = f" {question.get('reason')!r} at {question.get('node_id')}" if question else ""
    note = f"  note: {entry['note']}" if entry.get("note") else ""
    data = f"  data: {compact(entry['data'], 80)}" if entry.get("data") is not None else ""
    damaged = f"  damaged row: {entry['damaged']}" if entry.get("damaged") else ""
    return escape(
        f"{when(entry['at'])}  {entry['action']}{about} by {entry['actor'] or '(not named)'} "
        f"via {entry['via']}{note}{data}{damaged}"
    )


@click.group("runs")
def runs_group() -> None:
    """List and inspect runs."""


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
        checkpoints, damage = readable_rows(store, execution_id)
        detail = run_detail(store, run, checkpoints, damage)
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
    if run.app_version is not None:
        out.print(f"started by version {escape(run.app_version)}")
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
    out.print(table if rows or damage is not None else "[dim]no checkpoints yet[/]")
    if damage is not None:
        out.print(f"[bold red]damaged[/] {escape(damage.message)}")
        out.print(
            f"  seq {damage.seq} and the rows after it cannot be read, so they are not shown, "
            "and resume and fork from them are refused; the rows are kept as they are",
            markup=False,
        )
        if run.status not in ("completed", "failed", "cancelled"):
            eid = run.execution_id
            out.print(
                f"  `tether cancel {eid}` ends the run, `tether runs delete {eid}` removes it",
                markup=False,
            )
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
