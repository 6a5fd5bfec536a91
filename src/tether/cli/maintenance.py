"""Store upkeep: ``prune`` and ``db migrate``."""

from __future__ import annotations

import datetime as _dt
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from .. import _durations as durations
from ..errors import CorruptRecordError
from ..store.base import Checkpointer, PruneResult
from . import _errors
from ._app import display_url, open_store, store_options
from ._render import emit_json, err, out

_BATCHES = 50


def parse_duration(text: str, option: str = "--older-than") -> _dt.timedelta:
    """``text`` read by :func:`tether._durations.parse_duration` (``30d``, ``12h``, ``90m``,
    ``45s``).

    Raises:
        CommandError: (exit 4) anything else, or more than 36500 days, naming ``option``.
    """
    try:
        return durations.parse_duration(text, option)
    except ValueError as exc:
        raise _errors.CommandError(str(exc), _errors.BAD_INPUT) from None


def _prune_in_batches(
    store: Checkpointer, cutoff: _dt.datetime, plan: PruneResult, progress: Progress
) -> PruneResult:
    """Delete the planned runs oldest first, in batches, advancing ``progress`` per run.

    The protocol deletes by cutoff only, so each batch is a ``prune`` whose cutoff is just
    past the newest ``finished_at`` in it, never later than ``cutoff``: every batch deletes
    only runs that the whole prune would delete anyway.
    """
    ended = []
    for eid in plan.execution_ids:
        try:
            run = store.get_run(eid)
        except CorruptRecordError:  # a damaged run goes with the last batch (the cutoff)
            continue
        if run is not None and run.finished_at is not None:
            ended.append(run.finished_at)
    ended.sort()
    task = progress.add_task("deleting runs", total=plan.runs)
    total = PruneResult()
    size = max(1, len(ended) // _BATCHES)
    steps = [
        min(cutoff, ended[i] + _dt.timedelta(microseconds=2))
        for i in range(size - 1, len(ended), size)
    ]
    for step in [*steps, cutoff]:
        batch = store.prune(step)
        total.runs += batch.runs
        total.checkpoints += batch.checkpoints
        total.idempotency += batch.idempotency
        total.execution_ids += batch.execution_ids
        progress.update(task, completed=min(total.runs, plan.runs))
    return total


@click.command("prune")
@click.option(
    "--older-than",
    "older_than",
    required=True,
    metavar="AGE",
    help="Delete finished runs that ended longer ago than this: 45s, 90m, 12h, 30d.",
)
@click.option("--dry-run", is_flag=True, help="Only report what would be deleted.")
@store_options
def prune(older_than: str, dry_run: bool, db_url: str, as_json: bool) -> int:
    """Delete finished (completed or failed) runs that ended before a cutoff.

    Paused and unfinished runs are never touched: not their checkpoints, pending interrupts
    or idempotency cache.
    """
    age = parse_duration(older_than)
    cutoff = _dt.datetime.now(_dt.UTC) - age
    store = open_store(db_url, migrate=True)
    try:
        result = plan = store.prune(cutoff, dry_run=True)
        if not dry_run and plan.runs:
            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                console=err,
                disable=as_json,
                transient=False,
            ) as progress:
                result = _prune_in_batches(store, cutoff, plan, progress)
    finally:
        store.close()
    data: dict[str, Any] = {
        "dry_run": dry_run,
        "cutoff": cutoff,
        "runs": result.runs,
        "checkpoints": result.checkpoints,
        "idempotency": result.idempotency,
        "execution_ids": result.execution_ids,
    }
    if as_json:
        emit_json(data)
        return _errors.OK
    verb = "would delete" if dry_run else "deleted"
    out.print(
        f"{verb} {result.runs} finished run(s) ended before {cutoff:%Y-%m-%d %H:%M:%S} UTC: "
        f"{result.checkpoints} checkpoint(s), {result.idempotency} idempotency row(s)"
    )
    if dry_run:
        for eid in result.execution_ids:
            out.print(f"  {eid}")
    return _errors.OK


@click.group("db")
def db_group() -> None:
    """Database schema management."""


@db_group.command("migrate")
@store_options
def migrate(db_url: str, as_json: bool) -> int:
    """Create the schema or migrate it forward, and print its version.

    Creates a new SQLite file when none exists. Migrations run forward only; a database
    written by a newer tether is refused (exit 5).
    """
    store = open_store(db_url, create=True)
    try:
        store.setup()
        reader = getattr(store, "schema_version", None)
        version = reader() if callable(reader) else None
    finally:
        store.close()
    if as_json:
        emit_json({"url": display_url(db_url), "schema_version": version})
    else:
        shown = "unknown" if version is None else str(version)
        out.print(f"{display_url(db_url)}: schema version {shown}", markup=False)
    return _errors.OK


COMMANDS = (prune, db_group)
