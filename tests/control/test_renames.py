"""A deploy that renames a chain node and an agent's tool carries paused and crashed runs
across it (``Chain(renamed=)``, ``Agent(renamed_tools=)``; docs/design.md §12, "Deploys").
Old code in one process; new code in a ``tether worker`` or a fresh process; both backends."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

import tether
from tests.control.test_cancel import _ledger
from tests.hostile.conftest import raw_sql
from tests.support.proc import ROOT, child_env
from tests.support.waiting import wait_for
from tests.workers.procs import spawn_worker, stop_all

APP = "tests.control.deploy:app"


def _old_code(url: str, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", f"from tests.control.deploy import refunds, support\n{code}"],
        cwd=ROOT,
        env=child_env(TETHER_DATABASE_URL=url, TETHER_TEST_DEPLOY="1"),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _new_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", *args, "--db", url],
        cwd=ROOT,
        env=child_env(TETHER_TEST_DEPLOY="2"),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _ran(store: object) -> list[str]:
    return sorted(key for (key,) in raw_sql(store)("SELECT key FROM {t}ledger"))


def test_a_paused_and_a_crashed_run_continue_at_the_renamed_nodes_under_the_new_code(
    store_and_url, tmp_path
):
    store, url = store_and_url
    _ledger(store)
    paused = _old_code(
        url, "print(refunds.run({'eid': 'p', 'amount': 5}, execution_id='p').status)"
    )
    assert paused.stdout.strip() == "paused", paused.stderr
    crashed = _old_code(
        url,
        "refunds.run({'eid': 'c', 'amount': 7, 'crash': True, 'preapproved': True}, "
        "execution_id='c')",
    )
    assert crashed.returncode == -signal.SIGKILL
    # The paused run: answered from anywhere, continued by a worker running the new code.
    assert _new_cli(url, "approve", "p").returncode == 0
    worker = spawn_worker(url, tmp_path, "w", lease_seconds=3, app=APP, TETHER_TEST_DEPLOY="2")
    try:
        wait_for(lambda: store.get_run("p").status == "completed", "the paused run", 30)
    finally:
        stop_all([worker])
    # The crashed run: resumed by a fresh process with the new code (its owner is dead).
    resumed = _new_cli(url, "resume", "c", "--app", APP, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "completed"
    assert [(cp.node_id, cp.label) for cp in store.list("p")][-3:] == [
        ("manager_review", "node completed"),
        ("pay", "node completed"),
        ("run_end", "run completed"),
    ]
    assert [cp.node_id for cp in store.list("c")] == ["prepare", "review", "pay", "run_end"]
    assert store.list("c")[-1].state_snapshot["charged"] == 7
    # review ran under the old code and again, renamed, under the new; charge likewise.
    old = ["review:1:p", "review:1:c", "charge:1:c"]
    assert _ran(store) == sorted([*old, "review:2:p", "charge:2:p", "charge:2:c"])


def test_a_run_paused_in_a_renamed_tool_is_answered_under_the_new_name(store_and_url):
    store, url = store_and_url
    _ledger(store)
    paused = _old_code(url, "print(support.run('where is A-1?', execution_id='t').status)")
    assert paused.stdout.strip() == "paused", paused.stderr
    answered = _new_cli(url, "approve", "t", "--app", APP, "--json")
    assert answered.returncode == 0, answered.stdout + answered.stderr
    out = json.loads(answered.stdout)
    assert (out["status"], out["output"]) == ("completed", "It shipped.")
    assert _ran(store) == ["lookup:1:A-1", "lookup:2:A-1"]


@pytest.mark.parametrize("renamed", [{"a": "b", "b": "c"}, {"": "x"}, {"a": 3}])
def test_bad_rename_maps_are_refused(renamed):
    with pytest.raises(tether.ConfigurationError):
        tether.Chain("bad", renamed=renamed)
