"""The page and API at their edges, through Starlette's TestClient on both backends: the Host
and Origin checks, ids that try to reach another run, refusals that keep the session, limits."""

from __future__ import annotations

from starlette.testclient import TestClient

from tests.support.chains import orders_chain
from tests.web.conftest import TOKEN, bearer, csrf_of, login, paused_run
from tether.registry import Registry
from tether.web import create_app
from tether.web._guard import allowed_hosts_for
from tether.web._paths import run_url


def no_auth_client(store, base_url: str = "http://127.0.0.1:8000") -> TestClient:
    app = create_app(store, registry=Registry(orders_chain(store)), no_auth=True)
    return TestClient(app, base_url=base_url)


def test_no_auth_server_refuses_a_host_name_that_is_not_loopback_dns_rebinding(store):
    eid = paused_run(store)
    with no_auth_client(store, "http://rebind.attacker.example:8000") as attacker:
        for path in ("/pending", "/api/runs", f"/runs/{eid}"):
            refused = attacker.get(path)
            assert refused.status_code == 403, path
            assert "rebind.attacker.example" in refused.text
            assert "set-cookie" not in refused.headers
        assert attacker.post(f"/api/runs/{eid}/approve", json={}).status_code == 403
    assert store.get_pending_interrupt(eid).resume_value is None
    for name in ("http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000"):
        with no_auth_client(store, name) as local:
            assert local.get("/api/runs").status_code == 200, name


def test_a_write_from_another_origin_is_refused_even_on_the_right_host(store):
    eid = paused_run(store)
    with no_auth_client(store) as client:
        page = client.get("/pending")
        token = csrf_of(page.text)
        for origin in ("http://127.0.0.1:9999", "http://evil.example", "null"):
            refused = client.post(
                f"/runs/{eid}/approve",
                data={"csrf_token": token},
                headers={"origin": origin},
                follow_redirects=False,
            )
            assert refused.status_code == 403, origin
            assert client.post(
                f"/api/runs/{eid}/approve", json={}, headers={"origin": origin}
            ).status_code == (403), origin
        assert store.get_pending_interrupt(eid).resume_value is None
        same = client.post(
            f"/runs/{eid}/approve",
            data={"csrf_token": token},
            headers={"origin": "http://127.0.0.1:8000"},
            follow_redirects=False,
        )
        assert same.status_code == 303
    assert store.get_run(eid).status == "completed"


def test_serve_answers_to_the_address_it_listens_on_and_the_names_given():
    assert set(allowed_hosts_for("127.0.0.1")) == {"127.0.0.1", "localhost", "::1"}
    assert allowed_hosts_for("10.1.2.3") == ("10.1.2.3",)
    assert allowed_hosts_for("0.0.0.0") == ()
    assert allowed_hosts_for("0.0.0.0", ["approvals.example.com"]) == ("approvals.example.com",)


def test_a_token_server_with_allowed_hosts_refuses_other_hosts(store):
    app = create_app(store, token=TOKEN, allowed_hosts=["approvals.example.com"])
    with TestClient(app, base_url="http://approvals.example.com") as ok:
        assert ok.get("/api/runs", headers=bearer()).status_code == 200
    with TestClient(app, base_url="http://other.example.com") as other:
        assert other.get("/api/runs", headers=bearer()).status_code == 403


def test_a_refused_cross_site_post_does_not_log_the_operator_out(client, store):
    eid = paused_run(store)
    assert login(client).status_code == 303
    cookie = client.cookies.get("tether_session")
    # A cross-site form post: SameSite=Strict keeps the cookie home, so none is sent.
    client.cookies.clear()
    refused = client.post(f"/runs/{eid}/approve", data={"note": "x"}, follow_redirects=False)
    assert refused.status_code == 403
    assert "set-cookie" not in refused.headers
    client.cookies.set("tether_session", cookie)
    assert client.get("/pending", follow_redirects=False).status_code == 200


def test_an_id_with_dot_segments_answers_only_its_own_run(client, store):
    victim = paused_run(store, order_id="V-1")
    bait = f"x/../../runs/{victim}"
    dots = ".."
    for eid in (bait, dots):
        orders_chain(store).run({"order_id": "B-1", "amount": 500}, execution_id=eid)
    assert login(client).status_code == 303
    pending = client.get("/pending").text
    token = csrf_of(pending)
    assert f'action="{run_url(bait, "approve")}"' in pending
    assert 'action="/run/approve?execution_id=..' in pending
    for eid in (bait, dots):
        answered = client.post(
            run_url(eid, "approve"),
            data={"csrf_token": token, "execution_id": eid},
            follow_redirects=False,
        )
        assert answered.status_code == 303, answered.text
        assert store.get_run(eid).status == "completed"
        shown = client.get(answered.headers["location"])
        assert shown.status_code == 200 and "completed" in shown.text
    assert store.get_run(victim).status == "paused"
    assert store.get_pending_interrupt(victim).resume_value is None
    # Unencoded forms never reach a run: a bare dot segment, the alias without its id, an
    # action smuggled into the id's segment with %2F.
    for path in ("/runs/../approve", "/run/approve", "/run/approve?execution_id=x"):
        assert client.post(path, data={"csrf_token": token}).status_code == 404, path
    assert client.get(f"/api/runs/{victim}%2Fapprove", headers=bearer()).status_code == 404
    assert store.get_run(victim).status == "paused"


def test_a_form_posted_to_another_runs_address_changes_nothing(client, store):
    one, two = paused_run(store, order_id="O-1"), paused_run(store, order_id="O-2")
    assert login(client).status_code == 303
    token = csrf_of(client.get("/pending").text)
    crossed = client.post(run_url(two, "approve"), data={"csrf_token": token, "execution_id": one})
    assert crossed.status_code == 400 and "nothing was changed" in crossed.text
    assert store.get_pending_interrupt(one).resume_value is None
    assert store.get_pending_interrupt(two).resume_value is None


def test_api_limits_queued_status_and_either_spelling_of_a_runner(client, store):
    from tether.worker_process import enqueue

    paused = paused_run(store)
    queued = enqueue(store, "orders", {"order_id": "Q-1", "amount": 5})
    for bad in ("0", "abc", "1001", "-3"):
        for path in ("/api/runs", "/api/pending"):
            refused = client.get(f"{path}?limit={bad}", headers=bearer())
            assert refused.status_code == 400, (path, bad)
            assert "limit must be an integer from 1 to 1000" in refused.json()["error"]
    only = client.get("/api/runs?status=queued", headers=bearer()).json()
    assert [r["execution_id"] for r in only] == [queued]
    for name in ("orders", "chain:orders"):
        found = client.get(f"/api/runs?name={name}&status=paused", headers=bearer()).json()
        assert [r["execution_id"] for r in found] == [paused], name
    assert login(client).status_code == 303
    page = client.get("/runs?status=queued")
    assert page.status_code == 200 and queued in page.text and paused not in page.text


def test_notes_and_data_over_their_limits_are_refused_and_nothing_changes(client, store):
    from tether.audit import DATA_MAX_BYTES, NOTE_MAX_CHARS
    from tether.web._service import BODY_MAX_BYTES

    eid = paused_run(store)
    long_note = client.post(
        f"/api/runs/{eid}/approve", json={"note": "n" * (NOTE_MAX_CHARS + 1)}, headers=bearer()
    )
    assert long_note.status_code == 400 and "at most 2000" in long_note.json()["error"]
    big_data = client.post(
        f"/api/runs/{eid}/approve", json={"data": "d" * DATA_MAX_BYTES}, headers=bearer()
    )
    assert big_data.status_code == 413 and "bytes as JSON" in big_data.json()["error"]
    huge = client.post(
        f"/api/runs/{eid}/approve",
        content=b'{"note": "' + b"x" * (BODY_MAX_BYTES + 1) + b'"}',
        headers={**bearer(), "content-type": "application/json"},
    )
    assert huge.status_code == 413 and "larger than" in huge.json()["error"]
    assert login(client).status_code == 303
    token = csrf_of(client.get("/pending").text)
    form = client.post(
        f"/runs/{eid}/approve", data={"csrf_token": token, "data": '"' + "d" * DATA_MAX_BYTES + '"'}
    )
    assert form.status_code == 413
    assert store.get_pending_interrupt(eid).resume_value is None
    assert client.get("/pending", follow_redirects=False).status_code == 200


def test_a_damaged_row_spoils_only_its_own_entry_in_every_listing(client, store):
    from tests.support.damage import damage

    d = damage(store)
    runs = client.get("/api/runs", headers=bearer())
    assert runs.status_code == 200, runs.text
    by_id = {r["execution_id"]: r for r in runs.json()}
    assert set(by_id) == {*d.good, *d.damaged}
    assert all(by_id[e]["damaged"] is None for e in d.good)
    assert "input unreadable" in by_id[d.bad_input]["damaged"]
    assert by_id[d.bad_input]["input"] is None and by_id[d.bad_input]["runner_name"] == "orders"
    if d.bad_name:
        assert "runner_name unreadable" in by_id[d.bad_name]["damaged"]
        assert by_id[d.bad_name]["runner_name"] == "or\ufffd"
        assert "created_at unreadable" in by_id[d.bad_time]["damaged"]
    pending = client.get("/api/pending", headers=bearer())
    assert pending.status_code == 200, pending.text
    entries = {p["execution_id"]: p for p in pending.json()}
    assert set(entries) == {*d.good, *d.damaged}
    assert "context unreadable" in entries[d.bad_context]["damaged"]
    assert entries[d.good[0]]["context"] == {"amount": 500}
    # The run itself, read by id, is an error that names the run and the field.
    shown = client.get(f"/api/runs/{d.bad_input}", headers=bearer())
    assert shown.status_code == 500 and d.bad_input in shown.text and "input" in shown.text
    assert login(client).status_code == 303
    run_rows = [e for e in d.damaged if e != d.bad_context]
    for path, marked in (("/pending", [d.bad_context]), ("/runs", run_rows)):
        page = client.get(path)
        assert page.status_code == 200, page.text
        assert page.text.count("damaged row:") == len(marked), path
        assert all(e in page.text for e in [*d.good, *d.damaged]), path


def test_api_pages_with_keyset_links_counts_filters_and_sorts(client, store):
    from tests.support.damage import paused
    from tether.worker_process import enqueue

    for i in range(7):
        paused(store, f"p-{i}")
    enqueue(store, "orders", {"order_id": "Q", "amount": 1}, execution_id="q-1")
    seen: list[str] = []
    url: str | None = "/api/pending?limit=3"
    while url:
        page = client.get(url, headers=bearer())
        assert page.status_code == 200 and page.headers["x-total-count"] == "7"
        seen += [p["execution_id"] for p in page.json()]
        link = page.headers.get("link")
        url = link[1 : link.index(">")] if link else None
    assert seen == [f"p-{i}" for i in range(7)]  # oldest first, each once
    newest = client.get("/api/pending?sort=since&dir=desc&limit=2", headers=bearer()).json()
    assert [p["execution_id"] for p in newest] == ["p-6", "p-5"]
    found = client.get("/api/pending?q=p-4", headers=bearer())
    assert [p["execution_id"] for p in found.json()] == ["p-4"]
    assert found.headers["x-total-count"] == "1"
    assert (
        client.get("/api/pending?runner=chain:orders", headers=bearer()).headers["x-total-count"]
        == "7"
    )
    assert client.get("/api/pending?reason=nope", headers=bearer()).json() == []
    assert client.get("/api/pending?waiting=1d", headers=bearer()).json() == []
    assert len(client.get("/api/pending?waiting=0s", headers=bearer()).json()) == 7
    soon = client.get("/api/pending?waiting=soon", headers=bearer())
    assert soon.json()["error"].startswith("waiting 'soon' is not a duration; use a number")
    for bad in ("waiting=soon", "sort=color", "dir=up"):
        assert client.get(f"/api/pending?{bad}", headers=bearer()).status_code == 400, bad
    runs: list[str] = []
    url = "/api/runs?limit=3"
    while url:
        page = client.get(url, headers=bearer())
        assert page.headers["x-total-count"] == "8"
        runs += [r["execution_id"] for r in page.json()]
        link = page.headers.get("link")
        url = link[1 : link.index(">")] if link else None
    assert runs == ["q-1", *[f"p-{i}" for i in reversed(range(7))]]  # newest first
    assert client.get("/api/runs?status=queued", headers=bearer()).headers["x-total-count"] == "1"
