"""Repair in place: ``resume(execution_id, state_updates=...)`` continues a failed or crashed
chain run with its state patched, the patch recorded as its own row (docs/design.md, "Repair:
resume with state_updates"). Both backends; the crashed case in a fresh process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

import pytest

import tether
from tests.control.test_cancel import APP, _approval_chain
from tests.support.proc import ROOT, child_env
from tether import Chain, Resume, idempotent

CHARGES: list[int] = []


@idempotent
def _charge(amount: int) -> int:
    CHARGES.append(amount)
    return amount


def _needs_fix(state: dict[str, Any]) -> dict[str, Any]:
    if state.get("address") is None:
        raise ValueError("no shipping address")
    return {"shipped_to": state["address"]}


def _chain(store: Any) -> Chain:
    chain = Chain("ship", store)
    chain.add_node("charge", lambda state: {"charged": _charge(state["amount"])})
    chain.add_node("ship", _needs_fix)
    chain.add_node("done", lambda state: {"done": True})
    return chain


def test_a_failed_run_resumed_with_state_updates_continues_under_its_own_id(store):
    CHARGES.clear()
    chain = _chain(store)
    failed = chain.run({"amount": 30, "address": None})
    assert failed.status == "failed"
    eid = failed.execution_id
    fixed = chain.resume(eid, state_updates={"address": "1 Main St"})
    assert fixed.status == "completed" and fixed.execution_id == eid
    assert fixed.output["shipped_to"] == "1 Main St" and fixed.output["done"] is True
    assert CHARGES == [30]  # the charge step did not run again
    rows = store.list(eid)
    assert [cp.label for cp in rows] == [
        "node completed",
        "run failed",
        "state patched",
        "node completed",
        "node completed",
        "run completed",
    ]
    patch = rows[2]
    assert patch.node_input["state_updates"] == {"address": "1 Main St"}
    assert patch.node_input["patched_checkpoint_id"] == rows[0].checkpoint_id
    assert patch.node_input["status_before"] == "failed"
    assert patch.state_snapshot["address"] == "1 Main St" and patch.next_node_id == "ship"
    assert store.get_run(eid).status == "completed"
    [entry] = store.list_audit(eid)
    assert (entry.action, entry.checkpoint_id) == ("state_patched", patch.checkpoint_id)
    assert entry.data == {"state_updates": {"address": "1 Main St"}, "status_before": "failed"}


def test_state_updates_are_refused_for_a_paused_run_or_with_an_answer_and_nothing_is_written(
    store,
):
    chain = _approval_chain(store)
    paused = chain.run({})
    rows = len(store.list(paused.execution_id))
    with pytest.raises(tether.ConfigurationError, match="waits on a question"):
        chain.resume(paused.execution_id, state_updates={"x": 1})
    with pytest.raises(tether.ConfigurationError, match="without a resume_value"):
        chain.resume(paused.execution_id, Resume(approved=True), state_updates={"x": 1})
    with pytest.raises(tether.ConfigurationError, match="dict of state keys"):
        chain.resume(paused.execution_id, state_updates=["x"])  # type: ignore[arg-type]
    assert len(store.list(paused.execution_id)) == rows
    assert store.get_run(paused.execution_id).status == "paused"
    assert chain.resume(paused.execution_id, Resume(approved=True)).status == "completed"


def test_a_crashed_run_is_repaired_from_a_fresh_process_with_tether_resume_state(
    store_and_url,
):
    store, url = store_and_url
    store.setup()
    died = subprocess.run(
        [
            sys.executable,
            "-c",
            "from tests.control.app import fragile; "
            "fragile.run({'kill': True}, execution_id='crash-1')",
        ],
        cwd=ROOT,
        env=child_env(TETHER_DATABASE_URL=url),
        capture_output=True,
        timeout=60,
    )
    assert died.returncode == -signal.SIGKILL
    assert store.get_run("crash-1").status == "running"  # crashed mid-step
    args = ["resume", "crash-1", "--state", '{"kill": false}', "--app", APP, "--db", url]
    fixed = subprocess.run(
        [sys.executable, "-m", "tether.cli", *args, "--json"],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["status"] == "completed"
    rows = store.list("crash-1")
    assert [cp.step_type for cp in rows] == ["node", "state_patch", "node", "run_end"]
    assert rows[1].node_input["status_before"] == "running"
    assert rows[-1].state_snapshot == {"kill": False, "prepped": True, "survived": True}
