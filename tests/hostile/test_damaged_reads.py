"""A run or pending row damaged by hand, read by id: ``CorruptRecordError`` naming the run
and the unreadable field (the CLI's exit 5, the API's 500 with ``execution_id``), never a
``TypeError`` or ``ValueError`` from deep inside a view, and nothing is written."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cli.test_cli import tether_cli
from tests.hostile.conftest import counts, raw_sql
from tests.hostile.test_records import paused_chain, reopen
from tether.errors import CorruptRecordError

# (table, column, value): what a bad restore or a hand edit leaves. Postgres types its text
# and timestamp columns, so only JSON can be damaged there; SQLite stores whatever was written.
JSON_DAMAGE = [
    ("pending_interrupts", "context", b"\x00\xff"),
    ("pending_interrupts", "resume_value", b"{bad"),
]
SQLITE_DAMAGE = [
    ("pending_interrupts", "reason", b"\xff"),
    ("pending_interrupts", "created_at", "zz"),
    ("runs", "runner_name", b"\xff"),
    ("runs", "status", b"paused"),
]


@pytest.mark.parametrize(("table", "column", "value"), JSON_DAMAGE)
def test_damaged_json_in_a_pending_row_read_by_id_names_the_run_and_field(
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
