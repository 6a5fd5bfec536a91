"""The JSON API and the pages' server side, through Starlette's TestClient, on both backends."""

from __future__ import annotations

import threading

import httpx
import pytest
from starlette.testclient import TestClient

from tests.web.conftest import (
    TOKEN,
    bearer,
    completed_run,
    csrf_of,
    login,
    paused_run,
    stale_run_and_orphan_fork,
    start_server,
    stop_server,
)
from tether.registry import Registry
from tether.web import create_app


def test_api_refuses_requests_without_the_bearer_token(client, store):
    paused_run(store)
    for path in ("/api/runs", "/api/pending"):
        assert client.get(path).status_code == 401
        assert client.get(path, headers=bearer("wrong")).status_code == 401
    refused = client.post("/api/runs/x/approve", json={})
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Bearer")


def test_api_does_not_accept_the_login_cookie(client, store):
    eid = paused_run(store)
    assert login(client).status_code == 303
    assert client.get("/pending").status_code == 200  # the cookie works for pages...
    assert client.get("/api/runs").status_code == 401  # ...never for the API
    assert client.post(f"/api/runs/{eid}/approve", json={}).status_code == 401
    assert store.get_pending_interrupt(eid).resume_value is None


def test_api_lists_runs_with_status_and_runner_filters(client, store):
    done, paused = completed_run(store), paused_run(store)
    runs = client.get("/api/runs", headers=bearer()).json()
    assert {r["execution_id"]: r["status"] for r in runs} == {done: "completed", paused: "paused"}
    only = client.get("/api/runs?status=paused", headers=bearer()).json()
    assert [r["execution_id"] for r in only] == [paused]
    assert client.get("/api/runs?name=orders", headers=bearer()).json() != []
    assert client.get("/api/runs?name=other", headers=bearer()).json() == []
    assert len(client.get("/api/runs?limit=1", headers=bearer()).json()) == 1
    assert client.get("/api/runs?status=bogus", headers=bearer()).status_code == 400


def test_api_filters_runs_by_version_and_several_statuses_and_shows_the_version(
    client, store, monkeypatch
):
    monkeypatch.setenv("TETHER_APP_VERSION", "1.4")
    old = paused_run(store)
    monkeypatch.setenv("TETHER_APP_VERSION", "1.5")
    new_done, new_paused = completed_run(store), paused_run(store, order_id="C-3")
    listed = client.get("/api/runs?version=1.4", headers=bearer()).json()
    assert [(r["execution_id"], r["app_version"]) for r in listed] == [(old, "1.4")]
    both = client.get("/api/runs?version=1.5&status=paused,completed", headers=bearer()).json()
    assert {r["execution_id"] for r in both} == {new_done, new_paused}
    assert client.get("/api/runs?status=paused,bogus", headers=bearer()).status_code == 400
    assert client.get(f"/api/runs/{old}", headers=bearer()).json()["run"]["app_version"] == "1.4"


def test_api_shows_a_run_timeline_with_diffs_pending_interrupt_and_cache(client, store):
    eid = paused_run(store)
    shown = client.get(f"/api/runs/{eid}", headers=bearer()).json()
    assert shown["run"]["status"] == "paused" and shown["runner_available"] is True
    rows = shown["checkpoints"]
    assert [(r["node_id"], r["status"]) for r in rows] == [
        ("validate", "completed"),
        ("charge", "completed"),
        ("review", "interrupted"),
    ]
    assert rows[0]["diff"] == {"added": ["log", "valid"], "changed": [], "removed": []}
    assert rows[1]["diff"]["added"] == ["receipt"] and rows[1]["diff"]["changed"] == ["log"]
    assert rows[1]["node_output"] == {"updated_keys": ["log", "receipt"]}
    assert shown["pending_interrupt"]["context"] == {"amount": 500}
    assert shown["pending_interrupt"]["state"] == "waiting"
    assert list(shown["idempotency"].values()) == [{"charged": 500, "order_id": "A-1"}]
    assert client.get("/api/runs/nope", headers=bearer()).status_code == 404


def test_api_pending_lists_the_frozen_context_and_runner(client, store):
    eid = paused_run(store, amount=900)
    completed_run(store)
    (item,) = client.get("/api/pending", headers=bearer()).json()
    assert item["execution_id"] == eid and item["runner_name"] == "orders"
    assert item["context"] == {"amount": 900} and item["reason"] == "manager_approval"


def test_api_approve_resumes_the_run_and_a_second_approval_is_409_and_changes_nothing(
    client, store
):
    eid = paused_run(store)
    answered = client.post(
        f"/api/runs/{eid}/approve", json={"note": "fine", "data": {"cap": 400}}, headers=bearer()
    )
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert body["action"] == "resumed" and body["status"] == "completed"
    assert body["resume_value"] == {
        "approved": True,
        "data": {"cap": 400},
        "metadata": {"via": "api", "note": "fine"},
    }
    assert body["output"]["approved"] is True and body["output"]["notified"] is True
    rows_before = len(store.list(eid))

    again = client.post(f"/api/runs/{eid}/approve", json={}, headers=bearer())
    assert again.status_code == 409 and "already answered" in again.json()["error"]
    rejected = client.post(f"/api/runs/{eid}/reject", json={}, headers=bearer())
    assert rejected.status_code == 409
    assert len(store.list(eid)) == rows_before
    assert store.get_run(eid).status == "completed"


def test_api_reject_resumes_down_the_reject_branch(client, store):
    eid = paused_run(store)
    body = client.post(f"/api/runs/{eid}/reject", json={"note": "no"}, headers=bearer()).json()
    assert body["status"] == "completed"
    assert body["output"]["approved"] is False and body["output"]["rejected"] is True


def test_without_a_runner_for_the_run_the_answer_is_stored_and_says_so(store):
    eid = paused_run(store)
    app = create_app(store, registry=Registry(), token=TOKEN)
    with TestClient(app) as client:
        body = client.post(
            f"/api/runs/{eid}/approve", json={"note": "ok", "data": [1]}, headers=bearer()
        ).json()
        assert body["action"] == "answer_stored" and "no runner named 'orders'" in body["message"]
        pending = store.get_pending_interrupt(eid)
        assert pending.resume_value == {
            "approved": True,
            "data": [1],
            "metadata": {"via": "api", "note": "ok"},
        }
        assert store.get_run(eid).status == "paused"
        again = client.post(f"/api/runs/{eid}/reject", json={}, headers=bearer())
        assert again.status_code == 409
        assert store.get_pending_interrupt(eid).resume_value["approved"] is True
        shown = client.get(f"/api/runs/{eid}", headers=bearer()).json()
        assert shown["pending_interrupt"]["state"] == "answered"


def test_api_answer_of_a_run_that_never_paused_is_409_and_unknown_is_404(client, store):
    done = completed_run(store)
    assert client.post(f"/api/runs/{done}/approve", json={}, headers=bearer()).status_code == 409
    assert client.post("/api/runs/nope/approve", json={}, headers=bearer()).status_code == 404


def test_api_answer_must_be_json(client, store):
    eid = paused_run(store)
    form = client.post(f"/api/runs/{eid}/approve", data={"note": "x"}, headers=bearer())
    assert form.status_code == 415
    bad = client.post(
        f"/api/runs/{eid}/approve",
        content=b"{nope",
        headers={**bearer(), "content-type": "application/json"},
    )
    assert bad.status_code == 400
    assert client.post(f"/api/runs/{eid}/approve", json=[1], headers=bearer()).status_code == 400
    assert store.get_pending_interrupt(eid).resume_value is None


def test_pages_need_login_and_the_login_form_checks_the_token(client, store):
    paused_run(store)
    to_login = client.get("/pending", follow_redirects=False)
    assert to_login.status_code == 303 and to_login.headers["location"] == "/login?next=/pending"
    assert login(client, "wrong").status_code == 401
    assert client.get("/pending", follow_redirects=False).status_code == 303
    ok = login(client)
    assert ok.status_code == 303 and ok.headers["location"] == "/pending"
    cookie = ok.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert client.get("/pending").status_code == 200


def test_login_refuses_a_post_without_csrf_and_never_redirects_off_site(client):
    assert client.post("/login", data={"token": TOKEN}).status_code == 403
    page = client.get("/login")
    jump = client.post(
        "/login",
        data={"csrf_token": csrf_of(page.text), "token": TOKEN, "next": "//evil.example/x"},
        follow_redirects=False,
    )
    assert jump.headers["location"] == "/pending"


def test_form_post_without_or_with_a_foreign_csrf_token_is_403_and_changes_nothing(client, store):
    eid = paused_run(store)
    login(client)
    assert client.post(f"/runs/{eid}/approve", data={"note": "x"}).status_code == 403
    # A token minted for another session does not pass either.
    other = TestClient(client.app, base_url="http://127.0.0.1")
    foreign = csrf_of(other.get("/login").text)
    assert client.post(f"/runs/{eid}/approve", data={"csrf_token": foreign}).status_code == 403
    assert store.get_pending_interrupt(eid).resume_value is None


def test_form_approve_redirects_to_the_completed_run_and_a_second_is_409(client, store):
    eid = paused_run(store)
    login(client)
    token = csrf_of(client.get(f"/runs/{eid}").text)
    done = client.post(
        f"/runs/{eid}/approve", data={"csrf_token": token, "note": "ok"}, follow_redirects=False
    )
    assert done.status_code == 303 and done.headers["location"] == f"/runs/{eid}?notice=resumed"
    page = client.get(done.headers["location"])
    assert "the run resumed through its runner" in page.text and "status-completed" in page.text
    again = client.post(f"/runs/{eid}/reject", data={"csrf_token": token})
    assert again.status_code == 409 and "already answered" in again.text


def test_form_with_invalid_json_data_is_400_and_keeps_what_was_typed(client, store):
    eid = paused_run(store)
    login(client)
    token = csrf_of(client.get(f"/runs/{eid}").text)
    bad = client.post(
        f"/runs/{eid}/approve", data={"csrf_token": token, "note": "n1", "data": "{oops"}
    )
    assert bad.status_code == 400 and "not valid JSON" in bad.text
    assert "{oops" in bad.text and 'value="n1"' in bad.text
    assert store.get_pending_interrupt(eid).resume_value is None


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ('{"cap": 1, "cap": 2}', "the key &#39;cap&#39; appears twice"),
        ('{"note": "\\ud800"}', "lone surrogate escape"),
    ],
)
def test_form_data_that_does_not_read_one_way_is_400_and_answers_nothing(
    client, store, typed, said
):
    eid = paused_run(store)
    login(client)
    token = csrf_of(client.get(f"/runs/{eid}").text)
    bad = client.post(f"/runs/{eid}/approve", data={"csrf_token": token, "data": typed})
    assert bad.status_code == 400 and said in bad.text, bad.text
    pending = store.get_pending_interrupt(eid)
    assert pending is not None and pending.resume_value is None
    assert store.get_run(eid).status == "paused"


def test_everything_from_the_store_is_escaped_in_html(client, store):
    eid = paused_run(store, order_id="<script>alert(1)</script>")
    login(client)
    for path in ("/pending", f"/runs/{eid}", "/runs"):
        page = client.get(path)
        assert "<script>" not in page.text
    assert "&lt;script&gt;" in client.get(f"/runs/{eid}").text
    headers = client.get("/pending").headers
    assert "script-src" not in headers["content-security-policy"]  # default-src 'none'
    assert headers["x-frame-options"] == "DENY"


def test_runs_page_filters_by_status_and_runner(client, store):
    done, paused = completed_run(store), paused_run(store)
    login(client)
    only_paused = client.get("/runs?status=paused").text
    assert paused in only_paused and done not in only_paused
    assert "No runs match" in client.get("/runs?name=other").text


def test_no_auth_mode_serves_pages_without_login_but_still_checks_csrf(store):
    eid = paused_run(store)
    app = create_app(store, registry=None, no_auth=True)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get("/pending")
        assert page.status_code == 200 and eid in page.text
        assert client.get("/api/runs").status_code == 200
        assert client.post(f"/runs/{eid}/approve", data={}).status_code == 403
        ok = client.post(
            f"/runs/{eid}/approve", data={"csrf_token": csrf_of(page.text)}, follow_redirects=False
        )
        assert ok.headers["location"].endswith("notice=stored")


def test_create_app_needs_a_token_unless_no_auth(store):
    import pytest

    from tether.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="TETHER_UI_TOKEN"):
        create_app(store)


def test_two_concurrent_approvals_against_the_real_server_one_wins_one_gets_409(
    store, db_url, tmp_path
):
    eids = [paused_run(store, order_id=f"C-{i}") for i in range(3)]
    server = start_server(db_url, tmp_path / "serve.log")
    try:
        for eid in eids:
            codes: list[int] = []
            bodies: list[str] = []
            barrier = threading.Barrier(2)

            def approve(eid: str = eid) -> None:
                barrier.wait()
                r = httpx.post(
                    f"{server.url}/api/runs/{eid}/approve", json={}, headers=bearer(), timeout=30
                )
                codes.append(r.status_code)
                bodies.append(r.text)

            threads = [threading.Thread(target=approve) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(codes) == [200, 409], bodies
            assert store.get_run(eid).status == "completed"
            assert [cp.node_id for cp in store.list(eid)].count("notify") == 1
    finally:
        stop_server(server)


def test_sessions_are_signed_and_expire():
    import time as _time

    from tether.web._auth import SESSION_MAX_AGE_SECONDS, Sessions

    sessions = Sessions("tok")
    session, cookie = sessions.new(authenticated=True)
    assert sessions.load(cookie) == session
    nonce, flag, issued, user, sig = cookie.split(".")
    assert sessions.load(f"{nonce}.1.{issued}.{user}.{'0' * len(sig)}") is None
    assert Sessions("other").load(cookie) is None  # a new token logs everyone out
    old = str(int(_time.time()) - SESSION_MAX_AGE_SECONDS - 5)
    body = f"{nonce}.{flag}.{old}.{user}"
    assert sessions.load(f"{body}.{sessions._sign(body)}") is None
    assert sessions.csrf_ok(session, sessions.csrf_token(session))
    assert not sessions.csrf_ok(session, "")


def test_ids_holding_a_slash_open_and_answer_only_when_encoded_as_one_segment(client, store):
    from tests.support.chains import orders_chain

    eid = "tenant/order-1"
    orders_chain(store).run({"order_id": "S-1", "amount": 500}, execution_id=eid)
    split = client.get(f"/api/runs/{eid}", headers=bearer())
    assert split.status_code == 404 and "percent-encoded" in split.json()["error"]
    encoded = "tenant%2Forder-1"
    shown = client.get(f"/api/runs/{encoded}", headers=bearer())
    assert shown.json()["run"]["execution_id"] == eid
    answered = client.post(f"/api/runs/{encoded}/approve", json={}, headers=bearer())
    assert answered.status_code == 200, answered.text
    assert store.get_run(eid).status == "completed"
    assert login(client).status_code == 303
    page = client.get(f"/runs/{encoded}")
    assert page.status_code == 200 and "tenant/order-1" in page.text


def test_a_corrupt_run_is_a_500_that_names_the_problem_and_other_runs_still_read(client, store):
    from tests.hostile.conftest import raw_sql

    bad, good = paused_run(store), paused_run(store, order_id="A-2")
    # A damaged run record (a damaged checkpoint row is shown as far as it reads:
    # tests/web/test_damaged_runs.py).
    raw_sql(store)("UPDATE {t}runs SET input = ? WHERE execution_id = ?", (b"{not json", bad))
    api = client.get(f"/api/runs/{bad}", headers=bearer())
    assert api.status_code == 500, api.text
    body = api.json()
    assert body["kind"] == "CorruptRecordError" and body["execution_id"] == bad
    assert "not valid JSON" in body["error"] and "input" in body["error"]
    login(client)
    page = client.get(f"/runs/{bad}")
    assert page.status_code == 500 and "CorruptRecordError" in page.text
    assert client.get(f"/api/runs/{good}", headers=bearer()).status_code == 200


def test_api_and_pages_flag_a_stale_run_and_a_fork_whose_parent_was_pruned(
    client, store, db_url, tmp_path
):
    stale, fork, parent = stale_run_and_orphan_fork(store, db_url, tmp_path)
    runs = {r["execution_id"]: r for r in client.get("/api/runs", headers=bearer()).json()}
    assert runs[stale]["status"] == "running" and runs[stale]["stale"] is True
    assert runs[stale]["stale_reason"] == "owner_gone"
    assert runs[fork]["parent_pruned"] is True and runs[fork]["stale"] is False
    shown = client.get(f"/api/runs/{stale}", headers=bearer()).json()["run"]
    assert shown["stale"] is True and shown["stale_note"].startswith("stale (its process is gone")

    assert login(client).status_code == 303
    listing = client.get("/runs").text
    assert 'class="status status-stale"' in listing and "its process is gone" in listing
    assert f'fork of {parent} <span class="dim">(parent pruned)</span>' in listing
    page = client.get(f"/runs/{fork}").text
    assert "(parent pruned)" in page and f'href="/runs/{parent}"' not in page
    stale_page = client.get(f"/runs/{stale}").text
    assert "status-stale" in stale_page and "stale (its process is gone" in stale_page


def test_the_timeline_labels_rows_by_what_they_record(store):
    from tether import Agent
    from tether.testing import ScriptedLLM

    def lookup(order_id: str) -> str:
        """Look an order up."""
        raise RuntimeError("the order service is down")

    llm = ScriptedLLM([[{"name": "lookup", "arguments": {"order_id": "C-3"}}]])
    agent = Agent("helper", llm=llm, tools=[lookup], checkpointer=store)
    failed = agent.run("Where is C-3?")
    app = create_app(store, registry=Registry(agent), token=TOKEN)
    with TestClient(app, base_url="http://127.0.0.1") as c:
        shown = c.get(f"/api/runs/{failed.execution_id}", headers=bearer()).json()
        labels = [r["label"] for r in shown["checkpoints"]]
        assert labels == ["before model call", "before tool call", "run failed"]
        assert login(c).status_code == 303
        page = c.get(f"/runs/{failed.execution_id}").text
    assert "before tool call" in page and "<th>step_type</th>" not in page


def test_api_run_shows_the_answer_in_the_audit_trail_and_the_completed_runs_output(client, store):
    eid = paused_run(store)
    question = store.get_pending_interrupt(eid).checkpoint_id
    client.post(
        f"/api/runs/{eid}/approve", json={"note": "fine", "data": {"cap": 4}}, headers=bearer()
    )

    shown = client.get(f"/api/runs/{eid}", headers=bearer()).json()
    [entry] = shown["audit"]
    assert (entry["action"], entry["via"], entry["actor"], entry["note"], entry["data"]) == (
        "approved",
        "api",
        None,  # the shared token names nobody
        "fine",
        {"cap": 4},
    )
    assert entry["checkpoint_id"] == question and entry["interrupt"]["node_id"] == "review"
    assert shown["result"]["status"] == "completed"
    assert shown["result"]["output"]["notified"] is True
