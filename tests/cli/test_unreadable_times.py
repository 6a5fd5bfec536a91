"""A stored time that is no time (Postgres ``infinity``, SQLite text or ``1e300``), through
the real ``tether`` command on both backends: the listings show every other row normally
and that row marked damaged naming the column (exit 0); ``runs show`` of a run whose
checkpoint or audit entry holds one shows the rest (exit 0) as it shows a damaged state row;
a run or pending row that holds one, read by id, is a ``CorruptRecordError`` naming the run and
the column (exit 5), never psycopg's ``DataError`` worded as a refusal nor a traceback."""

from __future__ import annotations

import json
from typing import Any

from tests.cli.test_cli import as_json, tether_cli
from tests.hostile.conftest import raw_sql
from tests.support.times import paused, set_time, unreadable_times
from tether.audit import AuditEntry


def _no_driver_words(proc: Any) -> None:
    assert "DataError" not in proc.stderr and "refused" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "ValueError" not in proc.stderr, proc.stderr
    assert "OverflowError" not in proc.stderr, proc.stderr


def test_runs_list_shows_a_run_with_an_unreadable_time_as_damaged_and_the_others(store, db_url):
    good, bad = paused(store, "good"), paused(store, "bad")
    value = unreadable_times(store)[0]  # 'infinity' on Postgres, text on SQLite
    set_time(store, "runs", "lease_expires_at", value, bad)
    set_time(store, "runs", "finished_at", unreadable_times(store)[1], bad)
    listed = as_json(tether_cli(db_url, "runs", "list", "--json"))
    by_id = {r["execution_id"]: r for r in listed}
    assert set(by_id) == {good, bad}
    assert by_id[good]["damaged"] is None and by_id[good]["created_at"]
    damage = by_id[bad]["damaged"]
    assert "lease_expires_at unreadable" in damage and "finished_at unreadable" in damage
    assert by_id[bad]["runner_name"] == "orders" and by_id[bad]["created_at"]
    table = tether_cli(db_url, "runs", "list")
    assert table.returncode == 0, table.stderr
    assert "damaged" in table.stdout and "lease_expires_at" in table.stdout
    assert good in table.stdout and bad in table.stdout
    _no_driver_words(table)
    shown = tether_cli(db_url, "runs", "show", bad)  # a damaged run row read by id
    assert shown.returncode == 5, shown.stderr
    assert "CorruptRecordError" in shown.stderr and bad in shown.stderr
    assert "lease_expires_at" in shown.stderr
    _no_driver_words(shown)
    assert tether_cli(db_url, "runs", "show", good).returncode == 0


def test_pending_list_shows_a_question_with_an_unreadable_time_as_damaged(store, db_url):
    good, bad = paused(store, "good"), paused(store, "bad")
    set_time(store, "pending_interrupts", "due_at", unreadable_times(store)[0], bad)
    pending = as_json(tether_cli(db_url, "pending", "list", "--json"))
    by_id = {p["execution_id"]: p for p in pending}
    assert set(by_id) == {good, bad}
    assert by_id[good]["damaged"] is None
    assert "due_at unreadable" in by_id[bad]["damaged"] and by_id[bad]["due_at"] is None
    table = tether_cli(db_url, "pending", "list")
    assert table.returncode == 0, table.stderr
    assert "damaged" in table.stdout and good in table.stdout and bad in table.stdout
    _no_driver_words(table)


def test_runs_show_of_a_run_whose_checkpoint_time_is_unreadable_names_the_row(store, db_url):
    eid = paused(store, "bad")
    for value in unreadable_times(store):
        set_time(store, "checkpoints", "created_at", value, eid, seq=2)
        shown = tether_cli(db_url, "runs", "show", eid)
        assert shown.returncode == 0, (value, shown.stderr)
        _no_driver_words(shown)
        assert "damaged" in shown.stdout and f"{eid!r}, seq 2" in shown.stdout, shown.stdout
        assert "created_at" in shown.stdout and "pending interrupt" in shown.stdout
        detail = as_json(tether_cli(db_url, "runs", "show", eid, "--json"))
        assert [row["seq"] for row in detail["checkpoints"]] == [1]
        assert detail["damaged"]["seq"] == 2 and "created_at" in detail["damaged"]["error"]


def test_audit_and_runs_show_list_an_entry_with_an_unreadable_time_as_damaged(store, db_url):
    eid = paused(store, "bad")
    for note in ("first", "second"):
        store.record_audit(AuditEntry(eid, "cancelled", "cli", actor="ann", note=note))
    sql = raw_sql(store)
    for value in unreadable_times(store):
        sql("UPDATE {t}audit_log SET at = ? WHERE note = 'second'", (value,))
        exported = tether_cli(db_url, "audit", "--since", "1d", "--json")
        assert exported.returncode == 0, (value, exported.stderr)
        notes = {e["note"]: e for e in json.loads(exported.stdout)}
        assert notes["first"]["damaged"] is None
        if "second" in notes:  # '-infinity' is before any --since: not selected
            assert "at unreadable" in notes["second"]["damaged"]
        of_run = as_json(tether_cli(db_url, "audit", "--run", eid, "--json"))
        assert [e["note"] for e in of_run] == ["first", "second"], value
        assert of_run[1]["at"] is None and "at unreadable" in of_run[1]["damaged"]
        table = tether_cli(db_url, "audit", "--run", eid)
        assert table.returncode == 0, table.stderr
        assert "damaged" in table.stdout and "first" in table.stdout, table.stdout
        _no_driver_words(table)
        shown = tether_cli(db_url, "runs", "show", eid)
        assert shown.returncode == 0, shown.stderr
        assert "audit trail (2)" in shown.stdout and "at unreadable" in shown.stdout
        detail = as_json(tether_cli(db_url, "runs", "show", eid, "--json"))
        assert [e["damaged"] is None for e in detail["audit"]] == [True, False]
