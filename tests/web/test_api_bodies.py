"""What the write routes do with a body or an address they cannot take: refused with a status
and a message naming what was wrong, and the run left exactly as it was (read back from the
store), on both backends."""

from __future__ import annotations

from typing import Any

import pytest

from tests.web.conftest import bearer, paused_run
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


@pytest.mark.parametrize("action", WRITES)
@pytest.mark.parametrize("content", [b"\xff", b'{"note": "caf\xe9"}'])  # Latin-1, not UTF-8
def test_a_body_that_is_not_utf8_is_400_not_a_500_and_changes_nothing(
    client, store, action, content
):
    eid = paused_run(store)
    before = snapshot(store, eid)
    refused = client.post(f"/api/runs/{eid}/{action}", content=content, headers=JSON)
    assert refused.status_code == 400, refused.text
    assert "not UTF-8 text" in refused.json()["error"]
    assert snapshot(store, eid) == before
