"""Answering the pending interrupt of a paused damaged run (a checkpoint row that cannot be
decoded): refused on every surface before anything is written, with an error naming the run
and the damaged seq, and the run's rows, status, question and audit trail left exactly as they
were (docs/design.md §12, "A damaged run"); both backends.

The damage is the paused row's own state (the row a resume replays), a non-newest row's state
(the state chain the paused row replays through) or the paused row's ``node_input`` (the
answers a claim reads).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from starlette.testclient import TestClient

import tether
from tests.cli.test_cli import APP, tether_cli
from tests.hostile.conftest import raw_sql
from tests.support.answers_app import desk
from tests.support.chains import orders_chain
from tests.web.conftest import TOKEN, bearer, csrf_of, login
from tether import Resume
from tether.engine.claim import store_answer
from tether.errors import CorruptRecordError
from tether.registry import Registry
from tether.web import create_app

# (column, seq) of the orders chain's three rows: validate, charge, review (paused at seq 3).
DAMAGE = {
    "paused_state": ("state", 3),
    "older_state": ("state", 2),
    "paused_node_input": ("node_input", 3),
}
RUN_COLUMNS = "execution_id, runner_name, status, input, owner, error, attempts, finished_at"
LEASE_COLUMNS = "updated_at, lease_expires_at"


def paused(store: Any) -> str:
    result = orders_chain(store).run({"order_id": "D-1", "amount": 500})
    assert result.status == "paused" and len(store.list(result.execution_id)) == 3
    return result.execution_id


def damage(store: Any, eid: str, where: str) -> int:
    """Damage the run's row as ``where`` says; the damaged seq."""
    column, seq = DAMAGE[where]
    raw_sql(store)(
        f"UPDATE {{t}}checkpoints SET {column} = ? WHERE execution_id = ? AND seq = ?",
        (b"{bad", eid, seq),
    )
    return seq


def dump(store: Any, eid: str, *, lease: bool = True) -> dict[str, Any]:
    """Every stored row of the run, read outside tether. ``lease=False`` leaves out the run
    row's lease bookkeeping (a resume in code takes the run's lease before it reads a row)."""
    sql = raw_sql(store)
    cols = RUN_COLUMNS + (f", {LEASE_COLUMNS}" if lease else "")
    where = " WHERE execution_id = ?"
    return {
        "runs": sql(f"SELECT {cols} FROM {{t}}runs{where}", (eid,)),
        "checkpoints": sql(f"SELECT * FROM {{t}}checkpoints{where} ORDER BY seq", (eid,)),
        "pending": sql(f"SELECT * FROM {{t}}pending_interrupts{where}", (eid,)),
        "audit": sql(f"SELECT * FROM {{t}}audit_log{where} ORDER BY entry_id", (eid,)),
    }


def no_lease(store: Any, eid: str) -> None:
    """The run is not left leased: no owner, no lease that has not lapsed."""
    run = store.get_run(eid)
    assert run.owner is None, run
    assert run.lease_expires_at is None or run.lease_expires_at.timestamp() <= time.time() + 1


def names(text: str, eid: str, seq: int) -> None:
    assert f"{eid!r}, seq {seq}" in text, text


# --- the Python API -------------------------------------------------------------------------


@pytest.mark.parametrize("where", DAMAGE)
@pytest.mark.parametrize("approved", [True, False])
def test_resume_in_code_of_a_damaged_paused_chain_run_is_refused_naming_the_row(
    store: Any, where: str, approved: bool
) -> None:
    eid = paused(store)
    seq = damage(store, eid, where)
    before = dump(store, eid, lease=False)
    with pytest.raises(CorruptRecordError) as info:
        orders_chain(store).resume(eid, Resume(approved, metadata={"answered_by": "ops"}))
    assert info.value.execution_id == eid and info.value.seq == seq
    names(str(info.value), eid, seq)
    assert dump(store, eid, lease=False) == before
    no_lease(store, eid)


@pytest.mark.parametrize("column_seq", [("state", 3), ("state", 1), ("node_input", 3)])
def test_resume_in_code_of_a_damaged_paused_agent_run_is_refused_naming_the_row(
    store: Any, column_seq: tuple[str, int]
) -> None:
    column, seq = column_seq
    eid = desk(store).run("refund A-1").execution_id
    assert store.get_run(eid).status == "paused"
    raw_sql(store)(
        f"UPDATE {{t}}checkpoints SET {column} = ? WHERE execution_id = ? AND seq = ?",
        (b"{bad", eid, seq),
    )
    before = dump(store, eid, lease=False)
    with pytest.raises(CorruptRecordError) as info:
        desk(store).resume(eid, Resume(True))
    assert info.value.execution_id == eid and info.value.seq == seq
    names(str(info.value), eid, seq)
    assert dump(store, eid, lease=False) == before
    no_lease(store, eid)


# --- the CLI --------------------------------------------------------------------------------


@pytest.mark.parametrize("where", DAMAGE)
@pytest.mark.parametrize("verb", ["approve", "reject"])
@pytest.mark.parametrize("app", [False, True], ids=["store-only", "with-app"])
def test_tether_approve_or_reject_of_a_damaged_paused_run_is_refused_naming_the_row(
    store: Any, db_url: str, where: str, verb: str, app: bool
) -> None:
    eid = paused(store)
    seq = damage(store, eid, where)
    before = dump(store, eid)
    proc = tether_cli(db_url, verb, eid, *(["--app", APP] if app else []), "--note", "n")
    assert proc.returncode == 5, (proc.stdout, proc.stderr)
    assert "CorruptRecordError" in proc.stderr and "Traceback" not in proc.stderr
    names(proc.stderr, eid, seq)
    assert dump(store, eid) == before


@pytest.mark.parametrize("where", ["paused_state", "older_state"])
def test_tether_resume_of_a_stored_answer_on_a_run_damaged_since_is_refused(
    store: Any, db_url: str, where: str
) -> None:
    eid = paused(store)
    pending = store.get_pending_interrupt(eid)
    store_answer(store, eid, Resume(True, checkpoint_id=pending.checkpoint_id))
    seq = damage(store, eid, where)
    before = dump(store, eid)
    proc = tether_cli(db_url, "resume", eid, "--app", APP)
    assert proc.returncode == 5, (proc.stdout, proc.stderr)
    assert "CorruptRecordError" in proc.stderr and "Traceback" not in proc.stderr
    names(proc.stderr, eid, seq)
    assert dump(store, eid) == before


# --- the web --------------------------------------------------------------------------------


def web(store: Any, with_runner: bool) -> TestClient:
    registry = Registry(orders_chain(store)) if with_runner else None
    return TestClient(
        create_app(store, registry=registry, token=TOKEN), base_url="http://127.0.0.1"
    )


@pytest.mark.parametrize("where", DAMAGE)
@pytest.mark.parametrize("verb", ["approve", "reject"])
@pytest.mark.parametrize("with_runner", [False, True], ids=["store-only", "with-runner"])
def test_api_answer_of_a_damaged_paused_run_is_refused_naming_the_row(
    store: Any, where: str, verb: str, with_runner: bool
) -> None:
    eid = paused(store)
    seq = damage(store, eid, where)
    before = dump(store, eid)
    with web(store, with_runner) as client:
        got = client.post(f"/api/runs/{eid}/{verb}", headers=bearer(), json={"note": "n"})
    assert got.status_code == 500, got.text
    error = got.json()["error"]
    names(error, eid, seq)
    assert "cannot be answered" in error and "Traceback" not in got.text
    assert dump(store, eid) == before


@pytest.mark.parametrize("where", ["paused_state", "older_state"])
@pytest.mark.parametrize("with_runner", [False, True], ids=["store-only", "with-runner"])
def test_the_run_page_answer_form_of_a_damaged_paused_run_is_refused_naming_the_row(
    store: Any, where: str, with_runner: bool
) -> None:
    eid = paused(store)
    seq = damage(store, eid, where)
    before = dump(store, eid)
    with web(store, with_runner) as client:
        login(client)
        page = client.get(f"/runs/{eid}")
        assert page.status_code == 200, page.text
        form = {"csrf_token": csrf_of(page.text), "execution_id": eid, "note": "n"}
        got = client.post(f"/runs/{eid}/approve", data=form, follow_redirects=False)
    assert got.status_code == 500, got.text
    assert "cannot be answered" in got.text and f"seq {seq}" in got.text
    assert 'id="damaged"' in got.text  # the run page, showing the run as far as it reads
    assert "Traceback" not in got.text
    assert dump(store, eid) == before


# --- a worker picking up an answer stored before the damage -----------------------------------


@pytest.mark.parametrize("where", ["paused_state", "older_state"])
def test_a_worker_leaves_a_damaged_paused_run_with_a_stored_answer_as_it_was(
    store: Any, where: str
) -> None:
    eid = paused(store)
    pending = store.get_pending_interrupt(eid)
    store_answer(store, eid, Resume(True, checkpoint_id=pending.checkpoint_id))
    damage(store, eid, where)
    before = dump(store, eid, lease=False)
    started = time.monotonic()
    stats = tether.run_worker(
        Registry(orders_chain(store)),
        store,
        max_attempts=2,
        poll_interval_seconds=0.01,
        stop=lambda: time.monotonic() > started + 1.5,
    )
    after = dump(store, eid, lease=False)
    assert stats.dead_lettered == 0 and stats.finished == 0, stats
    assert after["checkpoints"] == before["checkpoints"] and after["audit"] == before["audit"]
    assert after["pending"] == before["pending"]
    assert store.get_run(eid).status == "paused"
    no_lease(store, eid)
