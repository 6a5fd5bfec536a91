"""The audit trail (docs/design.md, "The audit trail"), on both backends: every answer is
recorded with the run, in the transaction that stores it, and goes when the run is pruned."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.support.chains import orders_chain
from tether import Resume
from tether.audit import AuditEntry
from tether.errors import ChainResumeError, InterruptChangedError


def _paused(store, amount: int = 500) -> str:
    result = orders_chain(store).run({"order_id": "A-1", "amount": amount})
    assert result.status == "paused"
    return result.execution_id


def test_a_resume_in_code_records_who_answered_when_how_and_which_question(store):
    eid = _paused(store)
    question = store.get_pending_interrupt(eid).checkpoint_id
    before = dt.datetime.now(dt.UTC)
    value = Resume(True, {"limit": 400}, {"answered_by": "alice", "note": "ok under 400"})
    assert orders_chain(store).resume(eid, value).status == "completed"

    [entry] = store.list_audit(eid)
    assert (entry.action, entry.actor, entry.via, entry.note, entry.data) == (
        "approved",
        "alice",
        "code",
        "ok under 400",
        {"limit": 400},
    )
    assert entry.checkpoint_id == question
    assert entry.interrupt == {
        "reason": "manager_approval",
        "key": None,
        "occurrence": 0,
        "node_id": "review",
        "agent_path": None,
    }
    assert before - dt.timedelta(seconds=5) <= entry.at <= dt.datetime.now(dt.UTC)
    assert entry.at.tzinfo is not None and entry.entry_id is not None


def test_a_stored_answer_is_recorded_once_not_again_when_a_resume_picks_it_up(store):
    eid = _paused(store)
    pending = store.get_pending_interrupt(eid)
    value = Resume(False, None, {"via": "cli", "answered_by": "bob"})
    entry = AuditEntry(eid, "rejected", "cli", "bob", checkpoint_id=pending.checkpoint_id)
    assert store.answer_interrupt(
        eid, value.to_dict(), checkpoint_id=pending.checkpoint_id, audit=entry
    )
    assert orders_chain(store).resume(eid).status == "completed"
    assert [(e.action, e.actor, e.via) for e in store.list_audit(eid)] == [
        ("rejected", "bob", "cli")
    ]


def test_a_refused_answer_leaves_no_entry(store):
    eid = _paused(store)
    entry = AuditEntry(eid, "approved", "cli", "mallory")
    # Bound to a question the run does not wait on: refused, nothing recorded.
    assert not store.answer_interrupt(eid, {"approved": True}, checkpoint_id="nope", audit=entry)
    with pytest.raises(InterruptChangedError):
        orders_chain(store).resume(eid, Resume(True, checkpoint_id="not-the-question"))
    # Answered once; a second answer is refused and not recorded.
    assert store.answer_interrupt(
        eid, {"approved": True, "data": None, "metadata": {}}, audit=entry
    )
    assert not store.answer_interrupt(eid, {"approved": False}, audit=entry)
    assert len(store.list_audit(eid)) == 1


def test_entries_of_every_run_are_listed_since_a_time_and_pruned_with_their_run(store):
    first, second = _paused(store), _paused(store)
    chain = orders_chain(store)
    chain.resume(first, Resume(True, metadata={"answered_by": "alice"}))
    store.record_audit(AuditEntry(second, "note_added", "api", "carol", note="looked at it"))
    chain.resume(second, Resume(False, metadata={"answered_by": "bob", "via": "web"}))

    every = store.list_audit(since=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1))
    assert [(e.execution_id, e.action, e.actor) for e in every] == [
        (first, "approved", "alice"),
        (second, "note_added", "carol"),
        (second, "rejected", "bob"),
    ]
    assert store.list_audit(since=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)) == []
    assert len(store.list_audit(since=None, limit=2)) == 2

    pruned = store.prune(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1))
    assert set(pruned.execution_ids) == {first, second}
    assert store.list_audit(first) == [] and store.list_audit(since=None) == []


def test_answer_metadata_of_the_wrong_type_is_refused_before_anything_is_stored():
    with pytest.raises(ChainResumeError, match="answered_by"):
        Resume(True, metadata={"answered_by": 7})
    with pytest.raises(ChainResumeError, match="via"):
        Resume(True, metadata={"via": "carrier-pigeon"})
