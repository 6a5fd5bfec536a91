"""A run or pending row damaged by hand, read by id: ``CorruptRecordError`` naming the run
and the unreadable field (the CLI's exit 5, the API's 500 with ``execution_id``), never a
``TypeError`` or ``ValueError`` from deep inside a view, and nothing is written."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cli.test_cli import tether_cli
from tests.hostile.conftest import counts, raw_sql
from tests.hostile.test_records import paused_chain, reopen
from tether import Resume
from tether.errors import CorruptRecordError

# (table, column, value): what a bad restore or a hand edit leaves. Postgres types its text
# and timestamp columns, so only JSON can be damaged there; SQLite stores whatever was written.
BOTH_DAMAGE = [
    ("pending_interrupts", "context", b"\x00\xff"),
    ("pending_interrupts", "resume_value", b"{bad"),
    # a status this tether does not know (a newer writer's): was shown and resumed over
    ("runs", "status", "superseded"),
]
SQLITE_DAMAGE = [
    ("pending_interrupts", "reason", b"\xff"),
    ("pending_interrupts", "created_at", "zz"),
    ("runs", "runner_name", b"\xff"),
    ("runs", "status", b"paused"),
]


@pytest.mark.parametrize(("table", "column", "value"), BOTH_DAMAGE)
def test_damaged_json_or_an_unknown_status_read_by_id_names_the_run_and_field(
    store: Any, db_url: str, table: str, column: str, value: Any
) -> None:
    check_named(store, db_url, table, column, value)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("table", "column", "value"), SQLITE_DAMAGE)
def test_a_damaged_sqlite_run_or_pending_field_read_by_id_names_the_run_and_field(
    store: Any, db_url: str, table: str, column: str, value: Any
) -> None:
    check_named(store, db_url, table, column, value)


def check_named(store: Any, db_url: str, table: str, column: str, value: Any) -> None:
    eid = paused_chain(store).run({}).execution_id
    raw_sql(store)(f"UPDATE {{t}}{table} SET {column} = ? WHERE execution_id = ?", (value, eid))
    before = counts(store)
    other = reopen(store)
    read = other.get_run if table == "runs" else other.get_pending_interrupt
    with pytest.raises(CorruptRecordError) as info:
        read(eid)
    assert info.value.execution_id == eid and column in str(info.value), info.value
    proc = tether_cli(db_url, "runs", "show", eid)
    assert proc.returncode == 5, proc.stderr
    assert "CorruptRecordError" in proc.stderr and column in proc.stderr and eid in proc.stderr
    assert counts(store) == before


def test_a_damaged_run_can_be_deleted_confirmed_and_pruned(store: Any, db_url: str) -> None:
    # `tether runs delete` read the run first and stopped at its CorruptRecordError, so the
    # only way to remove a damaged run was SQL by hand; `tether prune` stopped at the first
    # damaged finished run, deleting nothing.
    sql = raw_sql(store)
    doomed = paused_chain(store).run({}).execution_id
    sql("UPDATE {t}runs SET input = ? WHERE execution_id = ?", (b"{not json", doomed))
    refused = tether_cli(db_url, "runs", "delete", doomed)  # no terminal, no --yes
    assert refused.returncode == 4 and "damaged" in refused.stderr and "--yes" in refused.stderr
    assert sql("SELECT COUNT(*) FROM {t}runs WHERE execution_id = ?", (doomed,)) == [(1,)]
    deleted = tether_cli(db_url, "runs", "delete", doomed, "--yes")
    assert deleted.returncode == 0, deleted.stderr
    assert sql("SELECT COUNT(*) FROM {t}checkpoints WHERE execution_id = ?", (doomed,)) == [(0,)]
    chain = paused_chain(store)
    finished = [chain.resume(chain.run({}).execution_id, Resume(True)) for _ in range(2)]
    sql(
        "UPDATE {t}runs SET input = ? WHERE execution_id = ?",
        (b"{not json", finished[0].execution_id),
    )
    pruned = tether_cli(db_url, "prune", "--older-than", "0s")
    assert pruned.returncode == 0, pruned.stderr
    assert [r.execution_id for r in store.list_runs()] == []
