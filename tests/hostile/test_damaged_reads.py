"""A run or pending row damaged by hand, read by id: ``CorruptRecordError`` naming the run
and the unreadable field (the CLI's exit 5, the API's 500 with ``execution_id``), never a
``TypeError`` or ``ValueError`` from deep inside a view, and nothing is written."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cli.test_cli import tether_cli
from tests.hostile.conftest import counts, raw_sql
from tests.hostile.test_records import paused_chain, reopen
from tether import Chain, Resume, cancel
from tether.errors import CorruptRecordError, RunCancelledError

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


def damaged_run(store: Any, status: str) -> tuple[str, bytes]:
    """A ``paused`` or ``failed`` run whose second row's state is damaged: its id, and the
    damaged bytes."""
    if status == "paused":
        eid = paused_chain(store).run({}).execution_id
    else:
        chain = Chain("hostile", store)
        chain.add_node("a", lambda s: {"a": 1})
        chain.add_node("b", lambda s: {"b": 2})
        chain.add_node("c", lambda s: {"c": 1 / 0})
        chain.add_edge("a", "b")
        chain.add_edge("b", "c")
        eid = chain.run({}).execution_id
    assert store.get_run(eid).status == status
    raw_sql(store)(
        "UPDATE {t}checkpoints SET state = ? WHERE execution_id = ? AND seq = 2", (b"{bad", eid)
    )
    return eid, b"{bad"


def stored(store: Any, eid: str, seq: int, column: str = "state") -> bytes:
    """The bytes row ``seq`` of the run holds in ``column``, read outside tether."""
    [(value,)] = raw_sql(store)(
        f"SELECT {column} FROM {{t}}checkpoints WHERE execution_id = ? AND seq = ?", (eid, seq)
    )
    return bytes(value)


@pytest.mark.parametrize("status", ["paused", "failed"])
def test_a_run_with_a_damaged_state_row_is_cancelled_and_its_rows_are_kept(
    store: Any, db_url: str, status: str
) -> None:
    # cancel copied the newest row's state onto its run-end row, so a state it could not
    # replay stopped it with the CorruptRecordError: the run could only be deleted.
    eid, damage = damaged_run(store, status)
    other = reopen(store)
    done = cancel(eid, reason="bad restore", by="ops", store=other)
    assert done.cancelled and done.status == "cancelled" and done.status_before == status
    assert done.damaged is not None and f"{eid!r}, seq 2" in done.damaged, done.damaged
    assert (done.withdrawn_checkpoint_id is not None) is (status == "paused")
    run = store.get_run(eid)
    assert run.status == "cancelled" and run.error == "Cancelled by ops: bad restore"
    assert store.get_pending_interrupt(eid) is None
    assert stored(store, eid, 2) == damage  # never rewritten
    end = store.get_last(eid)
    assert end.step_type == "run_end" and end.status == "cancelled"
    assert end.state_snapshot == {} and "seq 2" in end.node_output["damaged"]
    assert [e.action for e in store.list_audit(eid)] == ["cancelled"]
    # Still not resumable, still unreadable where it is damaged, forkable where it is not.
    with pytest.raises(RunCancelledError):
        paused_chain(other).resume(eid, Resume(True))
    with pytest.raises(CorruptRecordError):
        paused_chain(other).fork(eid)
    first = raw_sql(store)(
        "SELECT checkpoint_id FROM {t}checkpoints WHERE execution_id = ? AND seq = 1", (eid,)
    )[0][0]
    branch = paused_chain(other).fork(eid, first)
    assert branch.status == "paused" and branch.execution_id != eid
    again = tether_cli(db_url, "cancel", eid, "--reason", "twice")
    assert again.returncode == 0 and "nothing changed" in again.stdout, again.stderr
    assert stored(store, eid, 2) == damage


def test_tether_cancel_of_a_damaged_run_says_the_state_is_damaged(store: Any, db_url: str) -> None:
    eid, damage = damaged_run(store, "paused")
    proc = tether_cli(db_url, "cancel", eid, "--reason", "bad restore")
    assert proc.returncode == 0, proc.stderr
    assert "cancelled run" in proc.stdout and "damaged" in proc.stdout and "seq 2" in proc.stdout
    assert store.get_run(eid).status == "cancelled"
    assert stored(store, eid, 2) == damage


@pytest.mark.parametrize("column", ["state", "node_input"])
def test_runs_show_of_a_damaged_run_shows_what_reads_and_names_the_damaged_row(
    store: Any, db_url: str, column: str
) -> None:
    # runs show printed only the CorruptRecordError (exit 5): not the run's status, runner,
    # times, its readable rows or its question.
    eid = paused_chain(store).run({}).execution_id
    sql = raw_sql(store)
    sql(
        f"UPDATE {{t}}checkpoints SET {column} = ? WHERE execution_id = ? AND seq = 2",
        (b"{bad", eid),
    )
    before = counts(store)
    shown = tether_cli(db_url, "runs", "show", eid)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert eid in text and "chain:hostile" in text and "paused" in text and "created" in text
    assert "damaged" in text and f"{eid!r}, seq 2" in text, text
    assert "pending interrupt" in text  # the question the run waits on is still shown
    as_json = tether_cli(db_url, "runs", "show", eid, "--json")
    assert as_json.returncode == 0, as_json.stderr
    detail = json.loads(as_json.stdout)
    assert detail["run"]["status"] == "paused" and detail["run"]["runner_name"] == "hostile"
    assert [row["seq"] for row in detail["checkpoints"]] == [1]
    assert detail["damaged"]["seq"] == 2 and eid in detail["damaged"]["error"]
    assert detail["result"] is None
    assert counts(store) == before
    assert stored(store, eid, 2, column) == b"{bad"  # never rewritten


def test_runs_show_of_a_readable_run_reports_no_damage(store: Any, db_url: str) -> None:
    eid = paused_chain(store).run({}).execution_id
    detail = json.loads(tether_cli(db_url, "runs", "show", eid, "--json").stdout)
    assert detail["damaged"] is None and [r["seq"] for r in detail["checkpoints"]] == [1, 2]
