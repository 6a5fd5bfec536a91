"""Answers whose JSON Python's parser would take but JSON has no value for (NaN, Infinity, a
number past the float range) or that nest deeper than it can parse: refused with 400 naming
the problem, nothing stored.
Through Starlette's TestClient, on both backends."""

from __future__ import annotations

import pytest

from tests.web.conftest import bearer, csrf_of, login, paused_run

_JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b'{"data": NaN}', "NaN is not a JSON number"),
        (b'{"note": "x", "data": [1, -Infinity]}', "-Infinity is not a JSON number"),
        # valid JSON syntax, but a float past 1.8e308 parses as infinity: was a plain 500
        (b'{"data": {"amount": 1e999}}', "1e999 is too large"),
        (b'{"data": -2E+400}', "-2E+400 is too large"),
    ],
)
def test_api_answer_with_nan_or_infinity_is_400_and_stores_nothing(client, store, body, named):
    eid = paused_run(store)
    refused = client.post(f"/api/runs/{eid}/approve", content=body, headers={**bearer(), **_JSON})
    assert refused.status_code == 400 and named in refused.json()["error"]
    assert store.get_pending_interrupt(eid).resume_value is None
    assert store.get_run(eid).status == "paused"


def test_api_answer_nested_deeper_than_python_parses_but_under_the_size_cap_is_400(client, store):
    eid = paused_run(store)
    body = b'{"data": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    refused = client.post(f"/api/runs/{eid}/approve", content=body, headers={**bearer(), **_JSON})
    assert refused.status_code == 400 and "nested too deeply" in refused.json()["error"]
    assert store.get_pending_interrupt(eid).resume_value is None


def test_form_data_with_infinity_is_400_and_keeps_what_was_typed(client, store):
    eid = paused_run(store)
    login(client)
    token = csrf_of(client.get(f"/runs/{eid}").text)
    bad = client.post(
        f"/runs/{eid}/approve", data={"csrf_token": token, "note": "n1", "data": "Infinity"}
    )
    assert bad.status_code == 400 and "Infinity is not a JSON number" in bad.text
    assert store.get_pending_interrupt(eid).resume_value is None


def test_form_data_with_a_number_too_large_for_a_float_is_400(client, store):
    eid = paused_run(store)
    login(client)
    token = csrf_of(client.get(f"/runs/{eid}").text)
    bad = client.post(f"/runs/{eid}/approve", data={"csrf_token": token, "data": "[1e999]"})
    assert bad.status_code == 400 and "1e999 is too large" in bad.text
    assert store.get_pending_interrupt(eid).resume_value is None


def test_inbox_waiting_filter_too_long_for_a_date_is_400_not_500(client, store):
    paused_run(store)
    for path in ("/api/pending?waiting=999999d", "/api/pending?waiting=99999999999d"):
        refused = client.get(path, headers=bearer())
        assert refused.status_code == 400 and "more than 36500d" in refused.json()["error"]
    assert len(client.get("/api/pending?waiting=36500d", headers=bearer()).json()) == 0


def test_api_page_after_an_entry_answered_meanwhile_is_409_not_an_empty_page(client, store):
    first_ids = [paused_run(store) for _ in range(3)]
    page = client.get("/api/pending?limit=2", headers=bearer())
    assert page.status_code == 200 and 'rel="next"' in page.headers["link"]
    next_url = page.headers["link"].split(">")[0].lstrip("<")
    for entry in page.json():
        answered = client.post(
            f"/api/runs/{entry['execution_id']}/approve", json={}, headers=bearer()
        )
        assert answered.status_code == 200, answered.text
    refused = client.get(next_url, headers=bearer())
    assert refused.status_code == 409 and "first page" in refused.json()["error"], refused.text
    left = client.get("/api/pending", headers=bearer()).json()
    assert [e["execution_id"] for e in left] == [
        i for i in first_ids if i not in {e["execution_id"] for e in page.json()}
    ]


def test_api_deletes_a_damaged_run_once_confirmed(client, store):
    from tests.hostile.conftest import raw_sql

    eid = paused_run(store)
    raw_sql(store)("UPDATE {t}runs SET input = ? WHERE execution_id = ?", (b"{bad", eid))
    url = f"/api/runs/{eid}/delete"
    refused = client.post(url, json={}, headers=bearer())
    assert refused.status_code == 409 and "damaged" in refused.json()["error"], refused.text
    done = client.post(url, json={"confirm": True}, headers=bearer())
    assert done.status_code == 200 and done.json()["execution_id"] == eid, done.text
    assert client.get(f"/api/runs/{eid}", headers=bearer()).status_code == 404
