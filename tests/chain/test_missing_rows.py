"""A chain run with a delta row deleted from the middle of its state chain (a bad cleanup, a
partial restore): resume, fork and reads refuse it with ``CorruptRecordError`` naming the run
and the missing seq, never replaying the rows left into a state without the lost step's
change; ``runs show`` shows the rows before the gap and names it (docs/design.md, "A damaged
run"). SQLite and Postgres."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import tether
from tests.cli.test_cli import tether_cli
from tests.hostile.conftest import counts, raw_sql
from tests.hostile.test_records import reopen
from tether import Chain, Resume, interrupt
from tether.engine.claim import store_answer
from tether.errors import CorruptRecordError
from tether.registry import Registry

STEPS = 30


def long_chain(store: Any) -> Chain:
    """``STEPS`` nodes each appending one entry to ``log``, then a question."""
    chain = Chain("long", store)

    def step(i: int) -> Any:
        return lambda s: {"log": [*s.get("log", []), f"{i} " + "x" * 80]}

    for i in range(STEPS):
        chain.add_node(f"n{i}", step(i))
        if i:
            chain.add_edge(f"n{i - 1}", f"n{i}")
    chain.add_node("ask", lambda s: {"ok": interrupt("ship it?").approved})
    chain.add_edge(f"n{STEPS - 1}", "ask")
    return chain


def test_a_chain_run_missing_a_middle_delta_row_refuses_resume_and_fork_naming_the_seq(
    store: Any, db_url: str
) -> None:
    eid = long_chain(store).run({}).execution_id
    sql = raw_sql(store)
    select = "SELECT seq, base_seq, state_kind, checkpoint_id FROM {t}checkpoints"
    rows = sql(f"{select} WHERE execution_id = ? ORDER BY seq", (eid,))  # fmt: skip
    newest_seq, base = rows[-1][0], rows[-1][1]
    assert newest_seq - base > 4, rows  # the newest row replays several deltas
    gone = base + 2
    ids = {seq: cid for seq, _, _, cid in rows}
    sql("DELETE FROM {t}checkpoints WHERE execution_id = ? AND seq = ?", (eid, gone))
    before = counts(store)
    other = reopen(store)  # no writer head: every read goes to the rows
    message = f"run {eid!r}: rows are missing from its state chain at seq {gone}"
    try:
        for name, read in {
            "resume": lambda: long_chain(other).resume(eid, Resume(True)),
            "fork": lambda: long_chain(other).fork(eid),
            "fork after the gap": lambda: long_chain(other).fork(eid, ids[gone + 1]),
            "get_last": lambda: other.get_last(eid),
            "latest_resumable": lambda: tether.latest_resumable(other, eid),
            "list": lambda: other.list(eid),
        }.items():
            with pytest.raises(CorruptRecordError) as info:
                read()
            assert info.value.execution_id == eid and message in info.value.message, name
        assert counts(store) == before  # nothing claimed, answered or written
        branch = long_chain(other).fork(eid, ids[gone - 1])  # the rows before the gap read
        assert branch.status == "paused" and len(branch.state["log"]) == STEPS
    finally:
        other.close()
    shown = tether_cli(db_url, "runs", "show", eid, "--json")
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert [r["seq"] for r in detail["checkpoints"]] == list(range(1, gone))
    # the row named is the first that cannot be read; the message names the seq missing
    assert detail["damaged"]["seq"] == gone + 1 and message in detail["damaged"]["error"]
    listed = tether_cli(db_url, "runs", "list", "--json")
    assert listed.returncode == 0 and eid in listed.stdout, listed.stderr


def test_a_worker_leaves_a_paused_run_missing_a_row_with_its_stored_answer_as_it_was(
    store: Any,
) -> None:
    # The missing-rows error named no row (``seq`` None), so a worker took it for a passing
    # failure and retried the run until it was dead-lettered, instead of leaving it paused
    # with its answer as it leaves a run whose row cannot be decoded.
    eid = long_chain(store).run({}).execution_id
    pending = store.get_pending_interrupt(eid)
    store_answer(store, eid, Resume(True, checkpoint_id=pending.checkpoint_id))
    sql = raw_sql(store)
    [(base, newest)] = sql(
        "SELECT base_seq, seq FROM {t}checkpoints WHERE execution_id = ? ORDER BY seq DESC LIMIT 1",
        (eid,),
    )
    assert newest - base > 4
    sql("DELETE FROM {t}checkpoints WHERE execution_id = ? AND seq = ?", (eid, base + 2))
    before = counts(store)
    started = time.monotonic()
    stats = tether.run_worker(
        Registry(long_chain(store)),
        store,
        max_attempts=2,
        poll_interval_seconds=0.01,
        stop=lambda: time.monotonic() > started + 1.5,
    )
    assert stats.dead_lettered == 0 and stats.finished == 0, stats
    assert counts(store) == before
    run = store.get_run(eid)
    assert run.status == "paused", run
    assert store.get_pending_interrupt(eid).resume_value is not None
