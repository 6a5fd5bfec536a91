"""The audit trail and a finished run's result through the ``tether`` command, both backends:
``approve``/``reject`` record who answered (``--by``, else the OS user), ``runs show`` and its
``--json`` show the trail and the result, ``tether audit`` exports every run's entries."""

from __future__ import annotations

import getpass

from tests.cli.test_cli import APP, as_json, completed_run, paused_run, tether_cli
from tether import Chain


def test_approve_records_by_note_and_data_and_runs_show_prints_the_trail(store, db_url):
    eid = paused_run(store)
    question = store.get_pending_interrupt(eid).checkpoint_id
    stored = tether_cli(
        db_url, "approve", eid, "--by", "alice", "--note", "refund ok", "--data", '{"cap": 400}'
    )
    assert stored.returncode == 0, stored.stderr

    shown = as_json(tether_cli(db_url, "runs", "show", eid, "--json"))
    [entry] = shown["audit"]
    assert {k: entry[k] for k in ("action", "actor", "via", "note", "data", "checkpoint_id")} == {
        "action": "approved",
        "actor": "alice",
        "via": "cli",
        "note": "refund ok",
        "data": {"cap": 400},
        "checkpoint_id": question,
    }
    assert entry["interrupt"]["reason"] == "manager_approval"
    assert entry["interrupt"]["node_id"] == "review" and entry["interrupt"]["occurrence"] == 0
    assert entry["at"].endswith("+00:00")

    text = tether_cli(db_url, "runs", "show", eid)
    assert text.returncode == 0, text.stderr
    assert "audit trail (1)" in text.stdout
    assert "approved 'manager_approval' at review by alice via cli" in text.stdout
    assert "note: refund ok" in text.stdout


def test_reject_with_app_records_the_os_user_and_the_run_shows_its_output(store, db_url):
    eid = paused_run(store)
    done = tether_cli(db_url, "reject", eid, "--app", APP, "--note", "too much")
    assert done.returncode == 0, done.stderr

    shown = as_json(tether_cli(db_url, "runs", "show", eid, "--json"))
    [entry] = shown["audit"]
    assert (entry["action"], entry["actor"], entry["via"], entry["note"]) == (
        "rejected",
        getpass.getuser(),
        "cli",
        "too much",
    )
    assert shown["result"]["status"] == "completed"
    assert shown["result"]["output"]["approved"] is False
    assert shown["result"]["output"]["log"] == ["validate", "charge", "review", "reject"]


def test_runs_show_prints_a_completed_chains_output(store, db_url):
    eid = completed_run(store)
    shown = as_json(tether_cli(db_url, "runs", "show", eid, "--json"))
    assert shown["result"]["output"] == {
        "order_id": "B-2",
        "amount": 50,
        "valid": True,
        "receipt": {"charged": 50, "order_id": "B-2"},
        "log": ["validate", "charge", "notify"],
        "notified": True,
    }
    assert shown["audit"] == []
    text = tether_cli(db_url, "runs", "show", eid)
    assert 'output {"order_id":"B-2"' in text.stdout


def _explode(state):
    raise ValueError(f"no stock for {state['sku']}")


def test_runs_show_names_a_failed_runs_error_and_failing_node(store, db_url):
    chain = Chain("stock", store)
    chain.add_node("check", lambda s: {"checked": True})
    chain.add_node("reserve", _explode)
    eid = chain.run({"sku": "X-9"}).execution_id

    shown = as_json(tether_cli(db_url, "runs", "show", eid, "--json"))
    assert shown["result"]["status"] == "failed"
    assert shown["result"]["failed_node_id"] == "reserve"
    assert shown["result"]["error"] == "ValueError: no stock for X-9"
    text = tether_cli(db_url, "runs", "show", eid)
    assert "failed at reserve: ValueError: no stock for X-9" in text.stdout


def test_tether_audit_exports_every_runs_entries_since_a_time(store, db_url):
    first, second = paused_run(store), paused_run(store)
    assert tether_cli(db_url, "approve", first, "--by", "alice").returncode == 0
    assert tether_cli(db_url, "reject", second, "--by", "bob", "--note", "no").returncode == 0

    exported = as_json(tether_cli(db_url, "audit", "--since", "1h", "--json"))
    assert [(e["execution_id"], e["action"], e["actor"]) for e in exported] == [
        (first, "approved", "alice"),
        (second, "rejected", "bob"),
    ]
    one = as_json(tether_cli(db_url, "audit", "--run", second, "--json"))
    assert [e["actor"] for e in one] == ["bob"]
    assert as_json(tether_cli(db_url, "audit", "--since", "2999-01-01", "--json")) == []

    table = tether_cli(db_url, "audit")
    assert table.returncode == 0 and "alice" in table.stdout and "bob" in table.stdout

    bad = tether_cli(db_url, "audit", "--since", "last tuesday")
    assert bad.returncode == 4
    assert "--since 'last tuesday' is neither an age" in bad.stderr


def test_approve_refuses_a_note_or_data_too_large_to_record_and_leaves_the_question_pending(
    store, db_url
):
    from tether.audit import DATA_MAX_BYTES, NOTE_MAX_CHARS

    eid = paused_run(store)
    long_note = tether_cli(db_url, "approve", eid, "--note", "n" * (NOTE_MAX_CHARS + 1))
    assert long_note.returncode != 0
    assert f"--note: the note is {NOTE_MAX_CHARS + 1} characters" in long_note.stderr
    big_data = tether_cli(db_url, "approve", eid, "--data", '"' + "d" * DATA_MAX_BYTES + '"')
    assert big_data.returncode != 0
    assert "--data: the data is" in big_data.stderr

    assert store.get_pending_interrupt(eid) is not None
    shown = as_json(tether_cli(db_url, "runs", "show", eid, "--json"))
    assert shown["audit"] == []


def test_audit_of_an_unknown_run_is_an_error_and_a_known_run_without_entries_is_not(store, db_url):
    paused = paused_run(store)
    missing = tether_cli(db_url, "audit", "--run", "no-such-run")
    assert missing.returncode == 3, missing.stdout  # NOT_FOUND, as runs show
    assert "no run with execution_id 'no-such-run'" in missing.stderr
    quiet = tether_cli(db_url, "audit", "--run", paused, "--json")
    assert quiet.returncode == 0, quiet.stderr
    assert as_json(quiet) == []
