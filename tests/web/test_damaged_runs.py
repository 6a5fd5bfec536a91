"""A damaged run (a checkpoint row that cannot be decoded) on the run page and in
``GET /api/runs/{id}``: shown as far as its rows read, naming the damaged row, as
``tether runs show`` shows it; both backends."""

from __future__ import annotations

from typing import Any

from tests.hostile.conftest import counts, raw_sql
from tests.web.conftest import bearer, login, paused_run


def damaged(store: Any) -> str:
    """A paused run whose second row's state is not JSON."""
    eid = paused_run(store)
    assert len(store.list(eid)) >= 2
    raw_sql(store)(
        "UPDATE {t}checkpoints SET state = ? WHERE execution_id = ? AND seq = 2", (b"{bad", eid)
    )
    return eid


def test_api_shows_a_damaged_run_as_far_as_it_reads_and_names_the_row(client, store):
    # Before: a 500 with the CorruptRecordError only, no run, no timeline, no question.
    good = paused_run(store, order_id="G-1")
    eid = damaged(store)
    before = counts(store)
    got = client.get(f"/api/runs/{eid}", headers=bearer())
    assert got.status_code == 200, got.text
    detail = got.json()
    assert detail["run"]["execution_id"] == eid and detail["run"]["status"] == "paused"
    assert [row["seq"] for row in detail["checkpoints"]] == [1]
    assert detail["damaged"]["seq"] == 2 and f"{eid!r}, seq 2" in detail["damaged"]["error"]
    assert detail["result"] is None and detail["pending_interrupt"] is not None
    assert client.get(f"/api/runs/{good}", headers=bearer()).json()["damaged"] is None
    listed = client.get("/api/runs", headers=bearer()).json()
    assert {r["execution_id"] for r in listed} >= {eid, good}
    assert counts(store) == before


def test_run_page_shows_a_damaged_run_and_names_the_row(client, store):
    eid = damaged(store)
    login(client)
    page = client.get(f"/runs/{eid}")
    assert page.status_code == 200, page.text
    assert eid in page.text and 'id="damaged"' in page.text and "seq 2" in page.text
    assert "Timeline" in page.text and 'id="pending"' in page.text
    assert "CorruptRecordError" not in page.text
