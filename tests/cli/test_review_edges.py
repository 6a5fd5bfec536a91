"""Bad input found by a review pass, in subprocesses on both backends: each is refused with a
line naming the problem (exit 4), and nothing is written."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_cli import APP, paused_run, tether_cli


@pytest.mark.parametrize(
    "args",
    [
        ("prune", "--older-than", "99999999999d"),
        ("prune", "--older-than", "999999d"),
        ("audit", "--since", "999999d"),
        ("pending", "list", "--waiting", "999999999d"),
    ],
)
def test_a_duration_too_long_for_a_date_is_bad_input_not_a_crash(store, db_url, args):
    eid = paused_run(store)
    proc = tether_cli(db_url, *args)
    assert proc.returncode == 4, proc.stderr
    assert args[-2] in proc.stderr and repr(args[-1]) in proc.stderr
    assert "OverflowError" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert store.get_run(eid) is not None


def test_approve_data_with_nan_is_bad_input_and_leaves_the_run_paused(store, db_url):
    eid = paused_run(store)
    proc = tether_cli(db_url, "approve", eid, "--data", '{"amount": NaN}')
    assert proc.returncode == 4 and "NaN is not a JSON number" in proc.stderr, proc.stderr
    assert store.get_pending_interrupt(eid).resume_value is None


def test_serve_with_a_users_file_that_does_not_exist_refuses_to_start(store, db_url, tmp_path):
    # A typo in --users would otherwise serve a page nobody can log in to.
    missing = tmp_path / "userz.json"
    proc = tether_cli(db_url, "serve", "--users", str(missing), "--port", "1", TETHER_UI_TOKEN="")
    assert proc.returncode == 4, proc.stderr
    assert str(missing) in proc.stderr and "tether users add" in proc.stderr
    assert not missing.exists()


def test_a_bare_path_as_db_names_the_url_to_write_and_creates_nothing(tmp_path):
    for path in (str(tmp_path / "app.db"), "app.db"):
        proc = tether_cli(path, "runs", "list")
        assert proc.returncode == 4, proc.stderr
        assert f"sqlite:///{path}" in proc.stderr and "is a path" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[" * 5000 + "]" * 5000, "nested too deeply"),
        ('{"amount": NaN}', "NaN is not a JSON number"),
        ('{"amount": 1e999}', "1e999 is too large"),
    ],
    ids=["deep", "nan", "overflow"],
)
def test_enqueue_input_json_that_json_cannot_hold_is_bad_input_and_queues_nothing(
    store, db_url, text, named
):
    # Deep nesting escaped as a RecursionError (exit 1); NaN/1e999 were parsed, then refused
    # only as a SerializationError about the stored input.
    proc = tether_cli(db_url, "enqueue", "orders", text)
    assert proc.returncode == 4, proc.stderr
    assert "INPUT_JSON is not JSON" in proc.stderr and named in proc.stderr, proc.stderr
    assert len(proc.stderr.splitlines()) == 1
    assert store.list_runs() == []


def test_a_page_after_an_entry_answered_or_deleted_meanwhile_is_refused_not_empty(store, db_url):
    # Answer every entry of a page, then follow the printed next-page command: the entry the
    # page ended with is no longer pending, and the next page used to read "no pending
    # interrupts" while three were still waiting (the same for a run deleted meanwhile).
    from tests.support.damage import paused

    for i in range(6):
        paused(store, f"p-{i}")
    first = tether_cli(db_url, "pending", "list", "--limit", "3", "--json")
    assert "next page: tether pending list --after p-2" in first.stderr
    for entry in json.loads(first.stdout):
        assert tether_cli(db_url, "approve", entry["execution_id"], "--app", APP).returncode == 0
    refused = tether_cli(db_url, "pending", "list", "--after", "p-2")
    assert refused.returncode == 3, refused.stderr
    assert "p-2" in refused.stderr and "first page" in refused.stderr, refused.stderr
    again = tether_cli(db_url, "pending", "list", "--json")
    assert [p["execution_id"] for p in json.loads(again.stdout)] == ["p-3", "p-4", "p-5"]
    assert tether_cli(db_url, "runs", "delete", "p-4", "--yes").returncode == 0
    gone = tether_cli(db_url, "runs", "list", "--after", "p-4")
    assert gone.returncode == 3 and "p-4" in gone.stderr, gone.stderr
    assert tether_cli(db_url, "runs", "list", "--after", "never-was").returncode == 3
    last = tether_cli(db_url, "runs", "list", "--after", "p-0", "--json")  # the last page
    assert last.returncode == 0 and json.loads(last.stdout) == []
