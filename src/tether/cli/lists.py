"""``tether runs list`` and ``tether pending list``: keyset pages with filters.

A full page ends with a line on stderr giving the command for the next one
(``--after <execution_id>``), and the number of entries the filters match. A damaged row is
listed with what could be read and marked ``damaged`` (its own entry only; see
:class:`tether.store.Listings`).
"""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from ..errors import ConfigurationError
from ..store import PENDING_SORTS, Listings, PendingQuery, RunsQuery
from ..store.base import Checkpointer
from ..views import (
    RUN_STATUSES,
    missing_parents,
    pending_json,
    pending_state,
    run_json,
    run_note,
    runner_filter,
    runner_label,
    status_filter,
    time_left,
)
from ._app import open_store, store_options
from ._render import compact, emit_json, err, out, when
from .maintenance import parse_duration
from .runs import ID_COLUMN, pending_group, run_status_markup, runs_group

_DAMAGED = "[bold red]damaged[/]"


def _listings(store: Checkpointer) -> Listings:
    if not isinstance(store, Listings):
        raise ConfigurationError(f"{type(store).__name__} has no paged listings")
    return store


def _more(total: int | None, shown: int, next_after: str | None, command: str) -> None:
    if next_after is None:
        return
    err.print(
        f"{shown} of {total} shown; next page: {command} --after {next_after}",
        markup=False,
        highlight=False,
    )


def _seconds(text: str) -> float:
    return parse_duration(text, "--waiting").total_seconds()


def _search_option(fn: Any) -> Any:
    return click.option(
        "--search", metavar="TEXT", help="Only runs whose execution_id contains TEXT."
    )(fn)


def _after_option(fn: Any) -> Any:
    return click.option(
        "--after",
        metavar="EXECUTION_ID",
        help="The next page: the entries after this one (the id a full page names).",
    )(fn)


@runs_group.command("list")
@click.option(
    "--status",
    metavar="STATUS[,STATUS...]",
    help=f"Only runs in this status, or any of several ({', '.join(RUN_STATUSES)}).",
)
@click.option(
    "--version",
    "app_version",
    metavar="VERSION",
    help="Only runs started by this version of the code (Registry(version=...)).",
)
@click.option(
    "--name",
    "runner_name",
    metavar="RUNNER",
    help="Only runs of this runner ('orders' or 'chain:orders').",
)
@_search_option
@_after_option
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@store_options
def runs_list(
    status: str | None,
    app_version: str | None,
    runner_name: str | None,
    search: str | None,
    after: str | None,
    limit: int,
    db_url: str,
    as_json: bool,
) -> int:
    """List runs, newest first, a page at a time."""
    try:
        statuses = status_filter(status)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--status'") from None
    query = RunsQuery(
        status=statuses,
        runner_name=runner_filter(runner_name),
        app_version=app_version or None,
        search=search,
        after=after,
        limit=limit,
        count=True,
    )
    store = open_store(db_url)
    try:
        page = _listings(store).list_runs_page(query)
        pruned = missing_parents(store, page.items)
    finally:
        store.close()
    found = page.items
    if as_json:
        emit_json([run_json(r, parent_pruned=r.parent_execution_id in pruned) for r in found])
    elif not found:
        out.print("[dim]no runs[/]")
    else:
        table = Table(show_edge=False, header_style="bold")
        table.add_column("execution_id", **ID_COLUMN)
        table.add_column("runner")
        table.add_column("status", no_wrap=True)
        table.add_column("version", no_wrap=True)
        table.add_column("created (UTC)", no_wrap=True)
        table.add_column("updated (UTC)", no_wrap=True)
        table.add_column("note", overflow="fold")
        for run in found:
            note = run_note(run, run.parent_execution_id in pruned)
            if run.damaged:
                note = f"damaged row: {run.damaged}" + (f"; {note}" if note else "")
            table.add_row(
                escape(run.execution_id),
                escape(runner_label(run)),
                _DAMAGED if run.damaged else run_status_markup(run),
                escape(run.app_version or "-"),
                when(run.created_at),
                when(run.updated_at),
                escape(note if len(note) <= 120 else note[:119] + "…"),
            )
        out.print(table)
    _more(page.total, len(found), page.next_after, "tether runs list")
    return 0


@pending_group.command("list")
@click.option("--runner", metavar="RUNNER", help="Only runs of this runner.")
@click.option("--reason", metavar="REASON", help="Only interrupts with this reason.")
@click.option(
    "--waiting",
    metavar="AGE",
    help="Only interrupts waiting at least this long: 90s, 15m, 2h, 3d.",
)
@_search_option
@click.option(
    "--sort",
    type=click.Choice(sorted(PENDING_SORTS)),
    default="since",
    show_default=True,
    help="Order by waiting since, runner, step or reason.",
)
@click.option("--desc", is_flag=True, help="Reverse the order (newest first by default sort).")
@_after_option
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@store_options
def pending_list(
    runner: str | None,
    reason: str | None,
    waiting: str | None,
    search: str | None,
    sort: str,
    desc: bool,
    after: str | None,
    limit: int,
    db_url: str,
    as_json: bool,
) -> int:
    """List pending interrupts, oldest first, a page at a time (with the run's error, when
    a worker left the run for code that has its step)."""
    query = PendingQuery(
        runner_name=runner_filter(runner),
        reason=reason,
        waiting_seconds=None if waiting is None else _seconds(waiting),
        search=search,
        sort=sort,
        descending=desc,
        after=after,
        limit=limit,
        count=True,
    )
    store = open_store(db_url)
    try:
        page = _listings(store).list_pending_page(query)
    finally:
        store.close()
    if as_json:
        emit_json(
            [
                {
                    **pending_json(e.pending),
                    "runner_name": e.runner_name,
                    "run_error": e.run_error,
                }
                for e in page.items
            ]
        )
    elif not page.items:
        out.print("[dim]no pending interrupts[/]")
    else:
        table = Table(show_edge=False, header_style="bold")
        table.add_column("execution_id", **ID_COLUMN)
        # The question's id: `approve`/`reject --checkpoint` bind an answer to it.
        table.add_column("checkpoint_id", **ID_COLUMN)
        for column in ("runner", "node_id", "reason", "state"):
            table.add_column(column)
        table.add_column("since (UTC)", no_wrap=True)
        table.add_column("deadline", no_wrap=True)
        table.add_column("context", overflow="fold")
        for e in page.items:
            p = e.pending
            context = f"{_DAMAGED} {escape(p.damaged)}" if p.damaged else escape(compact(p.context))
            if e.run_error:
                context += f"\n[red]{escape(e.run_error)}[/]"
            table.add_row(
                escape(p.execution_id),
                escape(p.checkpoint_id),
                escape(e.runner_name or "?"),
                escape(p.node_id),
                escape(p.reason),
                pending_state(p),
                when(p.created_at),
                time_left(p),
                context,
            )
        out.print(table)
    _more(page.total, len(page.items), page.next_after, "tether pending list")
    return 0


COMMANDS: tuple[click.Command, ...] = ()  # the commands join the groups of cli.runs
