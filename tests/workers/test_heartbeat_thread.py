"""The heartbeat thread wakes for a new lease only when it is due before the thread's next look
(``tether.engine.lease._Heartbeats``; ``docs/workers.md``, "Leases and heartbeats")."""

from __future__ import annotations

import time
from typing import Any

import tether
from tether.engine.lease import _Heartbeats


def _leased(store: Any, execution_id: str, owner: str, lease_seconds: float) -> float:
    store.create_run(
        tether.RunRecord(execution_id, "r", "chain", owner=owner), lease_seconds=lease_seconds
    )
    return store.get_run(execution_id).lease_expires_at.timestamp()


def _wait_asleep(beats: _Heartbeats) -> None:
    deadline = time.monotonic() + 5
    while beats.sleeps_until == float("-inf"):
        assert time.monotonic() < deadline, "the heartbeat thread never went to sleep"
        time.sleep(0.005)


def test_a_lease_due_after_the_threads_next_look_does_not_wake_it_and_a_sooner_one_does(store):
    beats = _Heartbeats()
    _leased(store, "long1", "o1", 30)
    _leased(store, "long2", "o2", 30)
    first_expiry = _leased(store, "short", "o3", 0.6)
    try:
        beats.add(store, "o1", 30, "long1")
        _wait_asleep(beats)  # until o1's renewal, 10 s away
        woken = beats.wakeups
        beats.add(store, "o2", 30, "long2")  # due after the thread's next look
        time.sleep(0.1)
        assert beats.wakeups == woken

        beats.add(store, "o3", 0.6, "short")  # due in 0.2 s: the thread must wake for it
        deadline = time.monotonic() + 5
        while store.get_run("short").lease_expires_at.timestamp() <= first_expiry:
            assert time.monotonic() < deadline, "the short lease was never renewed"
            time.sleep(0.02)
        assert beats.wakeups > woken
    finally:
        for owner in ("o1", "o2", "o3"):
            beats.remove(owner)
