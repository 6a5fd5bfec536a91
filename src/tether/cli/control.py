"""``tether cancel`` and ``tether runs delete``: end a run for good, or remove it
(docs/design.md, "Cancel and delete"; docs/cli.md)."""

from __future__ import annotations

import sys
from dataclasses import asdict

import click
from rich.markup import escape

from ..audit import os_user
from ..control import CONFIRM_STATUSES
from ..control import cancel as cancel_run
from ..control import delete as delete_run
from ..errors import CorruptRecordError, RunNotFoundError
from . import _errors
from ._app import open_store, store_options
from ._render import emit_json, out, styled_status


@click.command("cancel")
@click.argument("execution_id")
@click.option("--reason", metavar="TEXT", help="Why; recorded on the run with who and when.")
@click.option("--by", metavar="NAME", help="Who cancels (default: the OS user).")
@store_options
def cancel(
    execution_id: str, reason: str | None, by: str | None, db_url: str, as_json: bool
) -> int:
    """Cancel a run: a queued run never starts, a paused run's question is withdrawn, a
    running run stops at its next step boundary (wherever it runs). The run ends
    `cancelled`: resume refuses it, fork still branches from it.

    Cancelling a run that already ended changes nothing and says so.
    """
    store = open_store(db_url, migrate=True)
    try:
        result = cancel_run(execution_id, reason=reason, by=by or os_user(), store=store, via="cli")
    finally:
        store.close()
    if as_json:
        emit_json(asdict(result))
        return 0
    if not result.cancelled:
        how = "was cancelled before" if result.status == "cancelled" else "had already ended"
        out.print(f"run {execution_id} {how}: {styled_status(result.status)} (nothing changed)")
        return 0
    out.print(
        f"cancelled run {execution_id} (was {escape(str(result.status_before))}): "
        f"{styled_status('cancelled')}"
    )
    if result.withdrawn_checkpoint_id:
        out.print(f"  question withdrawn (checkpoint {result.withdrawn_checkpoint_id})")
    if result.stopping:
        out.print("  the process running it stops at its next step boundary")
    if result.damaged:
        out.print(
            f"  its stored state is damaged ({escape(result.damaged)}): the cancelled row holds "
            "no state; the damaged rows are kept as they are"
        )
    return 0


@click.command("delete")
@click.argument("execution_id")
@click.option("--yes", is_flag=True, help="Delete a paused or running run without asking.")
@store_options
def runs_delete(execution_id: str, yes: bool, db_url: str, as_json: bool) -> int:
    """Delete one run and every row it has (checkpoints, pending question, idempotency
    cache), whatever its status. A paused or running run is deleted only after you confirm
    (or with --yes); `tether prune` remains the bulk tool for old finished runs."""
    store = open_store(db_url, migrate=True)
    try:
        status: str | None = None
        try:
            run = store.get_run(execution_id)
        except CorruptRecordError as exc:  # a damaged run can still be deleted, on purpose
            what = f"is damaged ({exc.message}); its status is unknown"
        else:
            if run is None:
                raise RunNotFoundError(
                    f"no run with execution_id {execution_id!r}", execution_id=execution_id
                )
            status = run.status
            what = f"is {status} (it " + (
                "waits for an answer)" if status == "paused" else "may be executing)"
            )
        if (status is None or status in CONFIRM_STATUSES) and not yes:
            if not sys.stdin.isatty():
                raise _errors.CommandError(
                    f"run {execution_id} {what}; pass --yes to delete it", _errors.BAD_INPUT
                )
            click.confirm(f"run {execution_id} {what}; delete it?", abort=True)
        result = delete_run(execution_id, store=store, only_if_status=status)
    finally:
        store.close()
    if as_json:
        emit_json(asdict(result))
        return 0
    out.print(
        f"deleted run {execution_id} ({styled_status(result.status)}): {result.checkpoints} "
        f"checkpoints, {result.idempotency} cached results, {result.pending} pending questions"
    )
    return 0


COMMANDS = (cancel,)
