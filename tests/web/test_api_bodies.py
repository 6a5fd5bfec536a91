"""What the write routes do with a body or an address they cannot take: refused with a status
and a message naming what was wrong, and the run left exactly as it was (read back from the
store), on both backends."""

from __future__ import annotations

from typing import Any

import pytest

from tests.web.conftest import bearer, csrf_of, login, paused_run
from tether import Checkpointer

JSON = {**bearer(), "content-type": "application/json"}
WRITES = ["approve", "reject", "cancel", "delete"]


def snapshot(store: Checkpointer, eid: str) -> tuple[Any, ...]:
    """What a refused request must not change: the run's status, the question it waits on
    (unanswered, unclaimed), its rows and its audit trail."""
    run = store.get_run(eid)
    pending = store.get_pending_interrupt(eid)
    assert run is not None and run.status == "paused"
    assert pending is not None and pending.resume_value is None and pending.claimed_by is None
    rows = [cp.checkpoint_id for cp in store.list(eid)]
    return run.status, pending.checkpoint_id, rows, len(store.list_audit(eid))


def refused_error(client: Any, store: Checkpointer, action: str, **request: Any) -> str:
    """POST ``request`` (``json=`` or ``content=``) to ``action`` of a new paused run: it must
    be 400 and leave the run as it was; its error message."""
    eid = paused_run(store)
    before = snapshot(store, eid)
    headers = bearer() if "json" in request else JSON
    refused = client.post(f"/api/runs/{eid}/{action}", headers=headers, **request)
    assert refused.status_code == 400, refused.text
    assert snapshot(store, eid) == before
    return str(refused.json()["error"])


@pytest.mark.parametrize("action", WRITES)
@pytest.mark.parametrize("content", [b"\xff", b'{"note": "caf\xe9"}'])  # Latin-1, not UTF-8
def test_a_body_that_is_not_utf8_is_400_not_a_500_and_changes_nothing(
    client, store, action, content
):
    assert "not UTF-8 text" in refused_error(client, store, action, content=content)


@pytest.mark.parametrize(
    ("action", "body", "key"),
    [
        ("approve", {"aproved": False}, "aproved"),
        ("approve", {"approved": False}, "approved"),  # the verdict is the address, not a key
        ("approve", {"valu": {"amount": 400}}, "valu"),
        ("approve", {"note": "ok", "Data": {"amount": 400}}, "Data"),
        ("reject", {"notes": "too much"}, "notes"),
        ("reject", {"checkpoint": "abc"}, "checkpoint"),
        ("cancel", {"reasn": "duplicate order"}, "reasn"),
        ("delete", {"confrim": True}, "confrim"),
    ],
)
def test_a_body_with_an_unknown_key_is_400_naming_it_and_changes_nothing(
    client, store, action, body, key
):
    assert f"unknown key {key!r}" in refused_error(client, store, action, json=body)


def test_an_unknown_key_is_named_with_the_key_it_is_close_to_and_the_shape(client, store):
    eid = paused_run(store)
    refused = client.post(f"/api/runs/{eid}/reject", json={"notes": "x"}, headers=bearer())
    assert refused.json()["error"] == (
        "unknown key 'notes' (did you mean 'note'?) in the body; approve or reject by the "
        "address (/api/runs/{id}/approve or /reject), not a key; the body is "
        '{"checkpoint_id": str?, "note": str?, "data": any?}; nothing was changed'
    )
    two = client.post(
        f"/api/runs/{eid}/cancel", json={"by": "a", "urgent": 1, "ticket": 2}, headers=bearer()
    )
    assert "unknown keys 'urgent', 'ticket' in the body" in two.json()["error"]


@pytest.mark.parametrize("action", WRITES)
@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"{nope", "not valid JSON"),
        (b"NaN", "not valid JSON"),
        (b"[1]", "must be a JSON object, not an array"),
        (b"null", "must be a JSON object, not null"),
        (b'"approve"', "must be a JSON object, not a string"),
        (b"true", "must be a JSON object, not a boolean"),
        (b"3", "must be a JSON object, not a number"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_400_saying_so_and_changes_nothing(
    client, store, action, content, said
):
    assert said in refused_error(client, store, action, content=content)


@pytest.mark.parametrize(
    ("action", "body", "said"),
    [
        ("approve", {"note": 5}, "'note' must be a string or null, not a number"),
        ("reject", {"note": ["no"]}, "'note' must be a string or null, not an array"),
        ("approve", {"checkpoint_id": 5}, "'checkpoint_id' must be a non-empty string or null"),
        ("approve", {"checkpoint_id": ""}, "'checkpoint_id' must be a non-empty string or null"),
        ("cancel", {"reason": 3}, "'reason' must be a string or null, not a number"),
        ("cancel", {"by": {"name": "a"}}, "'by' must be a string or null, not an object"),
        ("delete", {"confirm": "yes"}, "'confirm' must be true or false, not a string"),
        ("delete", {"confirm": None}, "'confirm' must be true or false, not null"),
    ],
)
def test_a_field_of_the_wrong_type_is_400_naming_it_and_changes_nothing(
    client, store, action, body, said
):
    assert said in refused_error(client, store, action, json=body)


def test_a_body_with_only_known_keys_still_answers_cancels_and_deletes(client, store):
    eid = paused_run(store)
    pending = store.get_pending_interrupt(eid)
    body = {"checkpoint_id": pending.checkpoint_id, "note": "ok", "data": {"cap": 400}}
    answered = client.post(f"/api/runs/{eid}/approve", json=body, headers=bearer())
    assert answered.status_code == 200, answered.text
    assert answered.json()["resume_value"]["data"] == {"cap": 400}
    assert store.get_run(eid).status == "completed"
    other = paused_run(store)
    cancel = {"reason": "dup", "by": "ops"}
    assert client.post(f"/api/runs/{other}/cancel", json=cancel, headers=bearer()).json()[
        "cancelled"
    ]
    gone = client.post(f"/api/runs/{other}/delete", json={"confirm": True}, headers=bearer())
    assert gone.status_code == 200 and store.get_run(other) is None


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_an_answer_naming_a_checkpoint_the_run_does_not_have_is_404_naming_it(
    client, store, action
):
    eid = paused_run(store)
    before = snapshot(store, eid)
    refused = client.post(
        f"/api/runs/{eid}/{action}", json={"checkpoint_id": "no-such-cp"}, headers=bearer()
    )
    assert refused.status_code == 404, refused.text
    assert f"run {eid!r} has no checkpoint 'no-such-cp'" in refused.json()["error"]
    assert snapshot(store, eid) == before


def test_an_answer_naming_an_earlier_checkpoint_of_the_run_stays_409(client, store):
    eid = paused_run(store)
    before = snapshot(store, eid)
    earlier = store.list(eid)[0].checkpoint_id
    refused = client.post(
        f"/api/runs/{eid}/approve", json={"checkpoint_id": earlier}, headers=bearer()
    )
    assert refused.status_code == 409
    assert f"at checkpoint {earlier} was not stored" in refused.json()["error"]
    assert snapshot(store, eid) == before


def test_the_form_naming_a_checkpoint_the_run_does_not_have_is_404_and_changes_nothing(
    client, store
):
    eid = paused_run(store)
    before = snapshot(store, eid)
    login(client)
    csrf = csrf_of(client.get(f"/runs/{eid}").text)
    refused = client.post(
        f"/runs/{eid}/approve",
        data={"csrf_token": csrf, "execution_id": eid, "checkpoint_id": "no-such-cp"},
        follow_redirects=False,
    )
    assert refused.status_code == 404
    assert "has no checkpoint &#39;no-such-cp&#39;" in refused.text
    assert snapshot(store, eid) == before


@pytest.mark.parametrize("action", WRITES)
def test_a_write_to_an_unknown_run_is_404_naming_it_and_changes_no_other_run(client, store, action):
    eid = paused_run(store)
    before = snapshot(store, eid)
    refused = client.post(f"/api/runs/no-such-run/{action}", json={}, headers=bearer())
    assert refused.status_code == 404
    assert "no run with execution_id 'no-such-run'" in refused.json()["error"]
    assert store.get_run("no-such-run") is None
    assert snapshot(store, eid) == before


@pytest.mark.parametrize(
    ("action", "content", "said"),
    [
        ("approve", b'{"note": "ok", "note": "not ok"}', "key 'note' appears twice;"),
        ("reject", b'{"note": "no", "data": null, "note": "yes"}', "key 'note' appears twice;"),
        ("cancel", b'{"by": "a", "by": "b"}', "key 'by' appears twice;"),
        ("delete", b'{"confirm": false, "confirm": true}', "key 'confirm' appears twice;"),
        ("approve", b'{"data": {"cap": 400, "cap": 4000}}', "key 'cap' appears twice in data;"),
        (
            "approve",
            b'{"data": [1, {"a": {"b": 1, "b": 2}}]}',
            "key 'b' appears twice in data[1].a;",
        ),
        ("approve", b'{"data": {"a b": {"x": [{"y": 0, "y": 0}]}}}', 'in data["a b"].x[0];'),
    ],
)
def test_a_body_with_a_duplicate_key_at_any_depth_is_400_naming_it_and_changes_nothing(
    client, store, action, content, said
):
    error = refused_error(client, store, action, content=content)
    assert error.startswith("in the body, the ") and said in error, error
    assert error.endswith("; nothing was changed"), error


def test_a_duplicate_key_is_refused_before_the_shape_is_checked(client, store):
    error = refused_error(client, store, "approve", content=b'{"value": 1, "value": 2}')
    assert error.startswith("in the body, the key 'value' appears twice"), error


@pytest.mark.parametrize("action", WRITES)
@pytest.mark.parametrize(
    ("content", "found"),
    [
        (b"\xef\xbb\xbf{}", "a UTF-8 byte order mark"),
        (b'\xef\xbb\xbf{"note": "ok"}', "a UTF-8 byte order mark"),
        ('\ufeff{"note": "ok"}'.encode("utf-16-le"), "UTF-16 LE (with a byte order mark)"),
        ('\ufeff{"note": "ok"}'.encode("utf-16-be"), "UTF-16 BE (with a byte order mark)"),
        ('\ufeff{"note": "ok"}'.encode("utf-32-le"), "UTF-32 LE (with a byte order mark)"),
        ('\ufeff{"note": "ok"}'.encode("utf-32-be"), "UTF-32 BE (with a byte order mark)"),
        ('{"note": "ok"}'.encode("utf-16-le"), "UTF-16 LE"),
        ('{"note": "ok"}'.encode("utf-16-be"), "UTF-16 BE"),
        ('{"note": "ok"}'.encode("utf-32-le"), "UTF-32 LE"),
        ('{"note": "ok"}'.encode("utf-32-be"), "UTF-32 BE"),
        ("{}".encode("utf-16-le"), "UTF-16 LE"),
    ],
)
def test_a_body_that_is_not_utf8_without_a_bom_is_400_naming_what_was_found(
    client, store, action, content, found
):
    error = refused_error(client, store, action, content=content)
    assert "the body must be UTF-8 JSON without a byte order mark" in error, error
    assert f"found {found};" in error, error
    assert "nothing was changed" in error


@pytest.mark.parametrize("action", WRITES)
@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"\xff", "byte 0xff at position 0"),
        (b'{"note": "caf\xe9"}', "byte 0xe9 at position 13"),
        (b'{"note": "\xed\xa0\x80"}', "byte 0xed at position 10"),  # an encoded surrogate
        (b'{"note": "ok\xc3"}', "byte 0xc3 at position 12"),  # a truncated sequence
    ],
)
def test_invalid_utf8_is_400_naming_the_byte_and_saying_nothing_was_changed(
    client, store, action, content, said
):
    error = refused_error(client, store, action, content=content)
    assert f"not UTF-8 text ({said})" in error, error
    assert "nothing was changed" in error


@pytest.mark.parametrize(
    ("content", "where"),
    [
        (b'{"note": "\\ud800"}', "in note;"),
        (b'{"data": {"list": ["ok", "\\udfff"]}}', "in data.list[1];"),
        (b'{"data": {"\\ud83d": 1}}', "in a key in data;"),
    ],
)
def test_a_lone_surrogate_escape_is_400_not_a_500_and_changes_nothing(
    client, store, content, where
):
    error = refused_error(client, store, "approve", content=content)
    assert "lone surrogate escape" in error and where in error, error
    assert error.endswith("; nothing was changed"), error


def test_a_body_that_reuses_a_key_only_in_separate_objects_still_answers(client, store):
    eid = paused_run(store)
    data = '[{"a": 1}, {"a": 2, "b": {"a": 3}}, "d\u00e9j\u00e0 vu", "\\ud83d\\ude00"]'
    content = f'{{"note": "fine", "data": {data}}}'.encode()
    answered = client.post(f"/api/runs/{eid}/approve", content=content, headers=JSON)
    assert answered.status_code == 200, answered.text
    assert answered.json()["resume_value"]["data"] == [
        {"a": 1},
        {"a": 2, "b": {"a": 3}},
        "d\u00e9j\u00e0 vu",
        "\U0001f600",  # an escaped surrogate pair is one character, and taken
    ]
