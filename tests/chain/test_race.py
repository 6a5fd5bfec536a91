"""Eight processes race to resume one paused run: exactly one proceeds, every time."""

from __future__ import annotations

from tests.support.chains import orders_chain
from tests.support.racers import race


def test_eight_processes_racing_to_resume_one_paused_run(store, db_url, monkeypatch, tmp_path):
    monkeypatch.setenv("TETHER_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    chain = orders_chain(store)
    eids = [chain.run({"order_id": f"R-{i}", "amount": 500}).execution_id for i in range(20)]
    outcomes = race(db_url, 8, eids)
    for eid, got in zip(eids, outcomes, strict=True):
        assert got == ["AlreadyResumed"] * 7 + ["completed"], (eid, got)
        assert store.get_run(eid).status == "completed"
    ledger = (tmp_path / "ledger.txt").read_text().splitlines()
    assert sorted(ledger) == sorted(f"charge R-{i} 500" for i in range(20))
