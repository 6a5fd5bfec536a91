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


def test_threads_sharing_one_store_race_to_resume(store, monkeypatch, tmp_path):
    """A loser's read of the older head must not move the writer's head back (it did: the
    winner then failed with ConcurrentWriteError)."""
    import threading

    import tether

    monkeypatch.setenv("TETHER_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    chain = orders_chain(store)
    for i in range(30):
        eid = chain.run({"order_id": f"T-{i}", "amount": 500}).execution_id
        barrier = threading.Barrier(3)
        out: list[str] = []

        def go() -> None:
            barrier.wait()
            try:
                out.append(chain.resume(eid, tether.Resume(approved=True)).status)
            except tether.AlreadyResumed:
                out.append("AlreadyResumed")

        threads = [threading.Thread(target=go) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(out) == ["AlreadyResumed", "AlreadyResumed", "completed"], out


def test_a_resumer_never_steals_a_lease_another_thread_just_took(store, monkeypatch, tmp_path):
    """Another thread that reads the run's owner right after this drive took the lease must see
    a live owner (LeaseHeldError), not a crashed drive of this process to take over (it did:
    the winner then lost its lease and committed nothing)."""
    import threading

    import tether

    monkeypatch.setenv("TETHER_TEST_LEDGER", str(tmp_path / "ledger.txt"))
    chain = orders_chain(store)
    eid = chain.run({"order_id": "W-1", "amount": 500}).execution_id
    took = store.aacquire_run_lease
    rival: list[BaseException | str] = []
    opened: list[bool] = []

    def rival_resume() -> None:
        try:
            rival.append(chain.resume(eid, tether.Resume(approved=True)).status)
        except BaseException as exc:  # recorded and asserted below
            rival.append(exc)

    async def acquire_then_let_a_rival_in(*args, **kwargs):
        got = await took(*args, **kwargs)
        if got[0] and not opened:  # the first drive just took the lease: open the window
            opened.append(True)
            t = threading.Thread(target=rival_resume)
            t.start()
            t.join()
        return got

    monkeypatch.setattr(store, "aacquire_run_lease", acquire_then_let_a_rival_in)
    assert chain.resume(eid, tether.Resume(approved=True)).status == "completed"
    assert len(rival) == 1 and isinstance(rival[0], tether.LeaseHeldError), rival
    assert store.get_run(eid).status == "completed"
