"""``tether audit``: the audit trail of every run, for export (docs/cli.md, "audit").

Each entry is one decision about a run (:mod:`tether.audit`): who answered which question,
when, through which surface, with which note and data.
"""

from __future__ import annotations

import datetime as _dt

import click
from rich.markup import escape
from rich.table import Table

from .. import _durations as durations
from ..errors import RunNotFoundError
from . import _errors
from ._app import open_store, store_options
from ._render import compact, emit_json, out, when
from .runs import ID_COLUMN


def parse_since(text: str) -> _dt.datetime:
    """``--since``: an age (``7d``, ``12h``: that long ago) or an ISO 8601 date or time
    (UTC unless it names an offset), as an aware UTC datetime
    (:func:`tether._durations.parse_since`).

    Raises:
        CommandError: (exit 4) neither.
    """
    try:
        return durations.parse_since(text, "--since")
    except ValueError as exc:
        raise _errors.CommandError(str(exc), _errors.BAD_INPUT) from None


@click.command("audit")
@click.option(
    "--since",
    default="30d",
    show_default=True,
    metavar="AGE|TIME",
    help="Entries recorded at or after this: an age (12h, 30d) or an ISO 8601 UTC time.",
)
@click.option("--run", "execution_id", metavar="EXECUTION_ID", help="Only this run's entries.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many.")
@store_options
def audit(
    since: str, execution_id: str | None, limit: int | None, db_url: str, as_json: bool
) -> int:
    """Export the audit trail: who approved or rejected which run, when, how, with which
    note and data, oldest first. Entries are kept as long as their run is."""
    start = parse_since(since)
    store = open_store(db_url)
    try:
        if execution_id is None:
            entries = store.list_audit(since=start, limit=limit)
        else:
            # An entry whose time cannot be read is kept: when it was is what is not known.
            entries = [
                e
                for e in store.list_audit(execution_id)
                if (e.at is None and e.damaged) or (e.at and e.at >= start)
            ]
            entries = entries[:limit] if limit is not None else entries
            if not entries and store.get_run(execution_id) is None:  # a typo is not "none"
                raise RunNotFoundError(
                    f"no run with execution_id {execution_id!r}", execution_id=execution_id
                )
    finally:
        store.close()
    if as_json:
        emit_json([e.as_dict() for e in entries])
        return _errors.OK
    if not entries:
        out.print(f"[dim]no audit entries since {when(start)} UTC[/]")
        return _errors.OK
    table = Table(show_edge=False, header_style="bold")
    table.add_column("at (UTC)", no_wrap=True)
    table.add_column("execution_id", **ID_COLUMN)
    for column in ("action", "by", "via", "question"):
        table.add_column(column)
    table.add_column("note / data", overflow="fold")
    for e in entries:
        question = e.interrupt or {}
        extra = [e.note or "", "" if e.data is None else compact(e.data, 80)]
        if e.damaged:
            extra.insert(0, f"damaged row: {e.damaged}")
        table.add_row(
            "[bold red]damaged[/]" if e.damaged and e.at is None else when(e.at),
            e.execution_id,
            escape(e.action),
            escape(e.actor or "(not named)"),
            escape(e.via),
            escape(f"{question.get('reason')} at {question.get('node_id')}" if question else "-"),
            escape("  ".join(x for x in extra if x)),
        )
    out.print(table)
    return _errors.OK


COMMANDS = (audit,)
