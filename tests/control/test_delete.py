"""Delete: one run and every row it has, whatever its status, a paused or running one only
when confirmed (docs/design.md, "Cancel and delete"). Both backends."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tether
from tests.control.test_cancel import _approval_chain
from tests.hostile.conftest import raw_sql
from tests.support.proc import ROOT, child_env
from tether import Chain, idempotent


def _rows(store, eid: str) -> dict[str, int]:
    sql = raw_sql(store)
    tables = ("runs", "checkpoints", "pending_interrupts", "idempotency_cache", "audit_log")
    return {
        t: sql(f"SELECT COUNT(*) FROM {{t}}{t} WHERE execution_id = ?", (eid,))[0][0]
        for t in tables
    }


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=child_env(),
        timeout=60,
    )


@idempotent
def _charge(n: int) -> int:
    return n


def test_delete_removes_every_row_of_one_run_and_leaves_others_and_forks(store):
    chain = Chain("charged", store)
    chain.add_node("charge", lambda state: {"charged": _charge(state["n"])})
    gone, kept = chain.run({"n": 1}), chain.run({"n": 2})
    fork = chain.fork(gone.execution_id, state_updates={"n": 3})
    assert _rows(store, gone.execution_id)["idempotency_cache"] == 1
    result = tether.delete(gone.execution_id, store=store)
    assert (result.status, result.idempotency, result.pending) == ("completed", 1, 0)
    assert result.checkpoints == 2
    assert set(_rows(store, gone.execution_id).values()) == {0}
    assert store.get_run(kept.execution_id).status == "completed"
    assert store.get_run(fork.execution_id).parent_execution_id == gone.execution_id
    with pytest.raises(tether.RunNotFoundError):
        tether.delete(gone.execution_id, store=store)


def test_delete_with_a_confirmed_status_refuses_a_run_whose_status_changed(store):
    paused = _approval_chain(store).run({})
    with pytest.raises(tether.RunStatusChangedError):
        tether.delete(paused.execution_id, store=store, only_if_status="failed")
    assert store.get_run(paused.execution_id).status == "paused"


def test_runs_delete_asks_before_deleting_a_paused_run(store, db_url):
    paused = _approval_chain(store).run({})
    eid = paused.execution_id
    tether.cancel(_approval_chain(store).run({}).execution_id, store=store)  # another's trail
    answered = _cli("approve", eid, "--db", db_url)  # stored, with its audit entry
    assert answered.returncode == 0, answered.stderr
    assert len(store.list_audit(eid)) == 1
    refused = _cli("runs", "delete", eid, "--db", db_url)  # no terminal to ask on
    assert refused.returncode == 4 and "--yes" in refused.stderr
    assert store.get_run(eid).status == "paused" and store.get_pending_interrupt(eid)
    assert len(store.list_audit(eid)) == 1
    done = _cli("runs", "delete", eid, "--yes", "--db", db_url, "--json")
    assert done.returncode == 0, done.stderr
    assert '"pending": 1' in done.stdout
    assert store.get_run(eid) is None and store.list_pending_interrupts() == []
    assert set(_rows(store, eid).values()) == {0}
    assert len(store.list_audit(None)) == 1  # the other run's cancel entry stays
    missing = _cli("runs", "delete", eid, "--yes", "--db", db_url)
    assert missing.returncode == 3


def test_runs_delete_of_a_finished_run_needs_no_confirmation(store, db_url):
    chain = Chain("plain", store)
    chain.add_node("a", lambda state: {"a": 1})
    eid = chain.run({}).execution_id
    done = _cli("runs", "delete", eid, "--db", db_url)
    assert done.returncode == 0, done.stderr
    assert "deleted run" in done.stdout and store.get_run(eid) is None
