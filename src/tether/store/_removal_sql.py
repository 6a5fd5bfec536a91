"""The statements that remove runs whole, built once for both SQL dialects.

A prune (docs/design.md §7) selects the finished runs that ended before a cutoff, then counts
or deletes their rows, one statement per table; a delete (§12, "Cancel and delete") removes one
run's rows the same way, as a set of one. The statements differ between the backends only in
how a table is named (Postgres: in the store's ``{schema}``), how a set of run ids is matched
and how the cutoff is read; each SQL module builds its :class:`RemovalStatements` with
:func:`removal_statements`.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["RemovalStatements", "removal_statements"]


class RemovalStatements(NamedTuple):
    """A dialect's removal statements; ``:ids``/``%(ids)s`` is the list of the runs removed.

    Attributes:
        select_prunable: the finished runs that ended before the cutoff, oldest end first.
        count_checkpoints: the checkpoint rows of the runs (a dry run).
        count_idempotent: their idempotency-cache rows (a dry run).
        delete_checkpoints: deletes their checkpoint rows.
        delete_idempotent: deletes their idempotency-cache rows.
        delete_pending: deletes their pending interrupts.
        delete_audit: deletes their audit trails.
        delete_runs: deletes the run rows (last: the other deletes read the runs).
    """

    select_prunable: str
    count_checkpoints: str
    count_idempotent: str
    delete_checkpoints: str
    delete_idempotent: str
    delete_pending: str
    delete_audit: str
    delete_runs: str


def removal_statements(table: str, of_runs: str, cutoff: str) -> RemovalStatements:
    """The removal statements of one dialect.

    Args:
        table: how a table is named, ``{}`` for its name (``"{{schema}}.{}"``, ``"{}"``).
        of_runs: the ``WHERE`` clause matching a row to the runs removed.
        cutoff: the cutoff parameter as a timestamp comparable with ``finished_at``.
    """
    of = table.format
    return RemovalStatements(
        f"SELECT execution_id FROM {of('runs')} "
        "WHERE status IN ('completed', 'failed', 'cancelled') "
        f"AND finished_at < {cutoff} ORDER BY finished_at",
        f"SELECT count(*) FROM {of('checkpoints')}{of_runs}",
        f"SELECT count(*) FROM {of('idempotency_cache')}{of_runs}",
        f"DELETE FROM {of('checkpoints')}{of_runs}",
        f"DELETE FROM {of('idempotency_cache')}{of_runs}",
        f"DELETE FROM {of('pending_interrupts')}{of_runs}",
        f"DELETE FROM {of('audit_log')}{of_runs}",
        f"DELETE FROM {of('runs')}{of_runs}",
    )
