"""Cancelling a run from the page and the API (docs/web.md), on both backends."""

from __future__ import annotations

from tests.web.conftest import bearer, completed_run, csrf_of, login, paused_run


def test_the_run_page_cancel_button_withdraws_the_question_and_an_answer_after_it_is_409(
    client, store
):
    eid = paused_run(store)
    login(client)
    page = client.get(f"/runs/{eid}").text
    assert f'action="/runs/{eid}/cancel"' in page
    token = csrf_of(page)
    assert client.post(f"/runs/{eid}/cancel", data={"reason": "x"}).status_code == 403
    assert store.get_run(eid).status == "paused"
    done = client.post(
        f"/runs/{eid}/cancel",
        data={"csrf_token": token, "reason": "customer withdrew"},
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"] == f"/runs/{eid}?notice=cancelled"
    shown = client.get(done.headers["location"]).text
    assert "status-cancelled" in shown and "Cancelled: customer withdrew" in shown
    [entry] = store.list_audit(eid)
    assert (entry.action, entry.via, entry.actor, entry.note) == (
        "cancelled",
        "web",
        None,
        "customer withdrew",
    )
    assert f'action="/runs/{eid}/cancel"' not in shown  # nothing left to cancel
    assert store.get_pending_interrupt(eid) is None
    late = client.post(f"/runs/{eid}/approve", data={"csrf_token": token})
    assert late.status_code == 409 and "was cancelled" in late.text
    assert store.get_run(eid).status == "cancelled"


def test_api_cancel_records_who_and_why_and_refuses_a_late_answer(client, store):
    eid, done = paused_run(store), completed_run(store)
    assert client.post(f"/api/runs/{eid}/cancel", json={}).status_code == 401
    assert client.post(f"/api/runs/{eid}/cancel", headers=bearer(), content="x").status_code == 415
    bad = client.post(f"/api/runs/{eid}/cancel", headers=bearer(), json={"reason": 3})
    assert bad.status_code == 400 and store.get_run(eid).status == "paused"
    out = client.post(
        f"/api/runs/{eid}/cancel", headers=bearer(), json={"reason": "dup", "by": "carol"}
    ).json()
    assert out["cancelled"] is True and out["status_before"] == "paused"
    assert (out["cancelled_by"], out["reason"]) == ("carol", "dup")
    assert out["withdrawn_checkpoint_id"]
    [entry] = store.list_audit(eid)
    assert (entry.action, entry.via, entry.actor, entry.note) == (
        "cancelled",
        "api",
        "carol",
        "dup",
    )
    assert entry.checkpoint_id == out["withdrawn_checkpoint_id"]
    assert client.get("/api/pending", headers=bearer()).json() == []
    late = client.post(f"/api/runs/{eid}/approve", headers=bearer(), json={})
    assert late.status_code == 409 and "cancelled by carol" in late.json()["error"]
    unchanged = client.post(f"/api/runs/{done}/cancel", headers=bearer(), json={}).json()
    assert (unchanged["cancelled"], unchanged["status"]) == (False, "completed")
    assert client.post("/api/runs/nope/cancel", headers=bearer(), json={}).status_code == 404


def test_the_delete_button_needs_the_confirmation_for_a_paused_run(client, store):
    eid, done = paused_run(store), completed_run(store)
    login(client)
    page = client.get(f"/runs/{eid}").text
    assert 'name="confirm"' in page
    token = csrf_of(page)
    unconfirmed = client.post(f"/runs/{eid}/delete", data={"csrf_token": token})
    assert unconfirmed.status_code == 409 and store.get_run(eid) is not None
    gone = client.post(
        f"/runs/{eid}/delete", data={"csrf_token": token, "confirm": "yes"}, follow_redirects=False
    )
    assert gone.status_code == 303 and gone.headers["location"] == "/runs?notice=deleted"
    assert store.get_run(eid) is None and store.list(eid) == []
    assert 'name="confirm"' not in client.get(f"/runs/{done}").text
    plain = client.post(f"/runs/{done}/delete", data={"csrf_token": token}, follow_redirects=False)
    assert plain.status_code == 303 and store.get_run(done) is None


def test_api_delete_needs_confirm_for_a_paused_run(client, store):
    eid = paused_run(store)
    assert client.post(f"/api/runs/{eid}/delete", json={}).status_code == 401
    refused = client.post(f"/api/runs/{eid}/delete", headers=bearer(), json={})
    assert refused.status_code == 409 and store.get_run(eid) is not None
    out = client.post(f"/api/runs/{eid}/delete", headers=bearer(), json={"confirm": True})
    assert out.status_code == 200 and out.json()["pending"] == 1
    assert client.get(f"/api/runs/{eid}", headers=bearer()).status_code == 404
