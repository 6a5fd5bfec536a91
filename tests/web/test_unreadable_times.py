"""A stored time that is no time (Postgres ``infinity``, SQLite text or ``1e300``) on the web
page and the JSON API, both backends: every listing (runs, the inbox, the audit trail) shows
the other rows normally and that row marked damaged naming the column; a run whose checkpoint
holds one is shown as far as its rows read; a run row that holds one, read by id, is a 500
naming the run and the column (as any damaged run row is), never psycopg's ``DataError``."""

from __future__ import annotations

from typing import Any

from tests.hostile.conftest import raw_sql
from tests.support.times import paused, set_time, unreadable_times
from tests.web.conftest import bearer, login
from tether.audit import AuditEntry


def _damaged_times(store: Any) -> tuple[str, str, str, str]:
    """``(good, bad_run, bad_pending, bad_checkpoint)``: four paused runs, the last three with
    an unreadable time in their run row, pending row and second checkpoint."""
    good, bad_run, bad_pending, bad_cp = (
        paused(store, e) for e in ("good", "bad-run", "bad-pending", "bad-cp")
    )
    value = unreadable_times(store)[0]
    set_time(store, "runs", "updated_at", value, bad_run)
    set_time(store, "pending_interrupts", "created_at", value, bad_pending)
    set_time(store, "checkpoints", "created_at", value, bad_cp, seq=2)
    return good, bad_run, bad_pending, bad_cp


def test_api_lists_rows_with_an_unreadable_time_as_damaged_and_the_others_normally(client, store):
    good, bad_run, bad_pending, bad_cp = _damaged_times(store)
    runs = client.get("/api/runs", headers=bearer())
    assert runs.status_code == 200, runs.text
    by_id = {r["execution_id"]: r for r in runs.json()}
    assert set(by_id) == {good, bad_run, bad_pending, bad_cp}
    assert "updated_at unreadable" in by_id[bad_run]["damaged"]
    assert all(by_id[e]["damaged"] is None for e in (good, bad_pending, bad_cp))
    pending = client.get("/api/pending", headers=bearer())
    assert pending.status_code == 200, pending.text
    entries = {p["execution_id"]: p for p in pending.json()}
    assert set(entries) == {good, bad_run, bad_pending, bad_cp}
    assert "created_at unreadable" in entries[bad_pending]["damaged"]
    assert entries[good]["damaged"] is None and entries[good]["created_at"]
    shown = client.get(f"/api/runs/{bad_cp}", headers=bearer())
    assert shown.status_code == 200, shown.text
    assert shown.json()["damaged"]["seq"] == 2 and "created_at" in shown.json()["damaged"]["error"]
    refused = client.get(f"/api/runs/{bad_run}", headers=bearer())
    assert refused.status_code == 500 and bad_run in refused.text and "updated_at" in refused.text
    assert "DataError" not in refused.text and "refused" not in refused.text


def test_pages_list_rows_with_an_unreadable_time_as_damaged(client, store):
    good, bad_run, bad_pending, bad_cp = _damaged_times(store)
    assert login(client).status_code == 303
    for path, marked in (("/pending", bad_pending), ("/runs", bad_run)):
        page = client.get(path)
        assert page.status_code == 200, page.text
        assert page.text.count("damaged row:") == 1, path
        assert "created_at unreadable" in page.text or "updated_at unreadable" in page.text
        assert all(e in page.text for e in (good, bad_run, bad_pending, bad_cp)), path
    run_page = client.get(f"/runs/{bad_cp}")
    assert run_page.status_code == 200 and 'id="damaged"' in run_page.text


def test_audit_page_and_api_list_an_entry_with_an_unreadable_time_as_damaged(client, store):
    eid = paused(store, "bad")
    for note in ("first", "second"):
        store.record_audit(AuditEntry(eid, "cancelled", "cli", actor="ann", note=note))
    value = unreadable_times(store)[0]
    raw_sql(store)("UPDATE {t}audit_log SET at = ? WHERE note = 'second'", (value,))
    api = client.get("/api/audit", headers=bearer())
    assert api.status_code == 200, api.text
    notes = {e["note"]: e for e in api.json()}
    assert notes["first"]["damaged"] is None and "at unreadable" in notes["second"]["damaged"]
    assert login(client).status_code == 303
    for path in ("/audit", f"/runs/{eid}"):
        page = client.get(path)
        assert page.status_code == 200, page.text
        assert "damaged row: at unreadable" in page.text and "first" in page.text, path
