"""What ``tether`` says about a run that needs attention, on both backends: a run whose process
died (stale), a fork whose parent was pruned, what a fork re-ran, and a first pause after a
crash. Runs are real: a child process SIGKILLed mid-node, a real prune, real forks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import APP, as_json, completed_run, paused_run, tether_cli
from tests.support.proc import run_child
from tests.support.results import run_of
from tests.support.stale_child import build as stuck_chain
from tests.support.stale_child import start_stuck
from tests.support.waiting import wait_for
from tether import Checkpointer, RunRecord
from tether._stale import staleness


def listed(db_url: str, eid: str) -> dict[str, Any]:
    runs = as_json(tether_cli(db_url, "runs", "list", "--json"))
    return next(r for r in runs if r["execution_id"] == eid)


def test_a_run_whose_process_died_is_shown_stale_at_once_and_a_live_one_is_not(
    store: Checkpointer, db_url: str, tmp_path: Path
) -> None:
    proc = start_stuck(db_url, "stuck-1", 30, tmp_path)
    try:
        live = listed(db_url, "stuck-1")
        assert live["status"] == "running"
        assert (live["stale"], live["stale_reason"], live["stale_note"]) == (False, None, None)
        assert "stale" not in tether_cli(db_url, "runs", "show", "stuck-1").stdout
    finally:
        proc.kill()
        proc.wait()

    # Its lease has 30 s to run, but its process is gone: nothing executes it.
    dead = listed(db_url, "stuck-1")
    assert dead["status"] == "running" and dead["stale"] is True
    assert dead["stale_reason"] == "owner_gone"
    assert dead["stale_note"].startswith("stale (its process is gone; its lease lapses at ")
    assert dead["lease_lapses_at"] is not None
    table = tether_cli(db_url, "runs", "list")
    line = next(x for x in table.stdout.splitlines() if "stuck-1" in x)
    assert "stale" in line and "its process is gone" in line
    shown = tether_cli(db_url, "runs", "show", "stuck-1")
    assert "stale (its process is gone" in shown.stdout
    assert "tether resume stuck-1 --app" in shown.stdout
    assert as_json(tether_cli(db_url, "runs", "show", "stuck-1", "--json"))["run"]["stale"]

    # Resumed, it is neither running nor stale any more.
    assert stuck_chain(store).resume("stuck-1").status == "completed"
    healed = listed(db_url, "stuck-1")
    assert healed["status"] == "completed" and healed["stale"] is False


def test_a_run_whose_lease_lapsed_says_when_it_lapsed(
    store: Checkpointer, db_url: str, tmp_path: Path
) -> None:
    proc = start_stuck(db_url, "stuck-2", 1, tmp_path)
    try:  # killed after its heartbeat renewed the 1 s lease at least once
        wait_for(lambda: run_of(store, "stuck-2").lease_expires_at, "a lease renewal")
    finally:
        proc.kill()
        proc.wait()
    run = wait_for(
        lambda: (
            (r := store.get_run("stuck-2")) is not None
            and (s := staleness(r)) is not None
            and s.reason == "lease_lapsed"
            and r
        ),
        "the lease of stuck-2 to lapse",
    )
    assert isinstance(run, RunRecord)
    at = f"{run.lease_expires_at:%Y-%m-%d %H:%M:%S} UTC"
    row = listed(db_url, "stuck-2")
    assert row["stale"] is True and row["stale_reason"] == "lease_lapsed"
    assert row["stale_note"] == f"stale (lease lapsed at {at})"
    shown = tether_cli(db_url, "runs", "show", "stuck-2")
    assert f"stale (lease lapsed at {at})" in shown.stdout
    assert "(lease lapsed at " in shown.stdout.split("owner", 1)[1]
    table = tether_cli(db_url, "runs", "list", "--status", "running")
    assert f"stale (lease lapsed at {at})" in table.stdout


def test_a_fork_whose_parent_was_pruned_says_parent_pruned(
    store: Checkpointer, db_url: str
) -> None:
    parent = completed_run(store)
    validate = store.list(parent)[0].checkpoint_id
    out = as_json(
        tether_cli(
            db_url,
            *("fork", parent, "--checkpoint", validate, "--state", '{"amount": 900}'),
            *("--app", APP, "--json"),
        )
    )
    branch = out["execution_id"]
    assert out["status"] == "paused"  # 900 needs a review: the branch is kept by prune
    before = listed(db_url, branch)
    assert before["parent_execution_id"] == parent and before["parent_pruned"] is False

    pruned = as_json(tether_cli(db_url, "prune", "--older-than", "0s", "--json"))
    assert pruned["execution_ids"] == [parent]

    after = listed(db_url, branch)
    assert after["parent_execution_id"] == parent and after["parent_pruned"] is True
    line = next(x for x in tether_cli(db_url, "runs", "list").stdout.splitlines() if branch in x)
    assert f"fork of {parent} (parent pruned)" in line
    shown = tether_cli(db_url, "runs", "show", branch)
    assert f"forked from {parent} at {validate} (parent pruned)" in shown.stdout
    assert as_json(tether_cli(db_url, "runs", "show", branch, "--json"))["run"]["parent_pruned"]


def test_fork_with_state_of_a_completed_run_needs_a_checkpoint(
    store: Checkpointer, db_url: str
) -> None:
    eid = completed_run(store)
    refused = tether_cli(db_url, "fork", eid, "--state", '{"amount": 900}', "--app", APP)
    assert refused.returncode == 4
    assert "re-runs nothing" in refused.stderr and "--checkpoint" in refused.stderr
    assert [r.execution_id for r in store.list_runs()] == [eid]
    helped = tether_cli(None, "fork", "--help")
    assert "Needs --checkpoint when the run completed" in " ".join(helped.stdout.split())


def test_fork_output_names_the_checkpoint_it_branched_from_and_the_steps_it_ran(
    store: Checkpointer, db_url: str
) -> None:
    eid = completed_run(store)
    validate = store.list(eid)[0].checkpoint_id
    args = ("fork", eid, "--checkpoint", validate, "--state", '{"amount": 60}', "--app", APP)
    data = as_json(tether_cli(db_url, *args, "--json"))
    assert data["parent_checkpoint_id"] == validate and data["steps"] == ["charge", "notify"]
    text = tether_cli(db_url, *args)
    assert f"branched from {eid} at checkpoint {validate} (validate)" in text.stdout
    assert "ran: charge > notify" in text.stdout

    # Without --state, a fork of a completed run says it had nothing left to run.
    copy = tether_cli(db_url, "fork", eid, "--app", APP)
    assert "ran: no step (nothing was left to run)" in copy.stdout

    # A paused run's newest checkpoint is its question: --state alone is enough there.
    paused = paused_run(store)
    fork_paused = ("fork", paused, "--state", '{"note": "x"}', "--app", APP, "--json")
    asked = as_json(tether_cli(db_url, *fork_paused))
    assert asked["status"] == "paused" and asked["steps"] == ["review"]


def test_resume_after_a_crash_reports_a_first_pause_without_again(
    store: Checkpointer, db_url: str
) -> None:
    code, _ = run_child(
        [db_url, "orders", "run", "crashed-1", '{"order_id": "C-1", "amount": 500}'],
        fault="chain.after_commit",
    )
    assert code != 0 and run_of(store, "crashed-1").status == "running"
    resumed = tether_cli(db_url, "resume", "crashed-1", "--app", APP)
    assert resumed.returncode == 0, resumed.stderr
    assert "paused at review (manager_approval)" in resumed.stdout
    assert "again" not in resumed.stdout


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_runs_show_labels_rows_by_what_they_record(store: Checkpointer, db_url: str) -> None:
    from tether import Agent
    from tether.testing import ScriptedLLM

    def lookup(order_id: str) -> str:
        """Look an order up."""
        raise RuntimeError("the order service is down")

    llm = ScriptedLLM([[{"name": "lookup", "arguments": {"order_id": "C-3"}}]])
    failed = Agent("helper", llm=llm, tools=[lookup], checkpointer=store).run("Where is C-3?")
    assert failed.status == "failed"
    rows = as_json(tether_cli(db_url, "runs", "show", failed.execution_id, "--json"))
    labels = [(r["node_id"], r["label"]) for r in rows["checkpoints"]]
    assert labels == [
        ("turn:0", "before model call"),
        ("turn:0/tool:lookup", "before tool call"),
        ("run_end", "run failed"),
    ]
    text = tether_cli(db_url, "runs", "show", failed.execution_id).stdout
    assert "before tool call" in text and "run failed" in text
    assert "tool_call" not in text and "completed" not in text
