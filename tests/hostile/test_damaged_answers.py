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
