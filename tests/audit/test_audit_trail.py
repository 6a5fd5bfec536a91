"""The audit trail (docs/design.md §5, "The audit trail"), on both backends: every answer is
recorded with the run, in the transaction that stores it, and goes when the run is pruned."""

from __future__ import annotations

import datetime as dt
from typing import Any

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
        Resume(True, metadata={"via": ["web"]})


def test_a_forks_resume_value_is_recorded_in_the_branchs_trail_not_the_sources(store):
    eid = _paused(store)
    question = store.get_pending_interrupt(eid).checkpoint_id
    chain = orders_chain(store)
    branch = chain.fork(
        eid, question, resume_value=Resume(False, metadata={"answered_by": "carol", "note": "why"})
    )
    assert branch.status == "completed"
    assert store.list_audit(eid) == []
    [entry] = store.list_audit(branch.execution_id)
    assert (entry.action, entry.actor, entry.via, entry.note, entry.checkpoint_id) == (
        "rejected",
        "carol",
        "code",
        "why",
        question,
    )
    assert entry.interrupt["node_id"] == "review"


def test_an_entry_whose_stored_json_is_damaged_is_listed_with_the_damage_named(tmp_path):
    import sqlite3

    from tether.store.sqlite import SQLiteCheckpointer

    store = SQLiteCheckpointer(tmp_path / "t.db")
    eid = _paused(store)
    orders_chain(store).resume(eid, Resume(True, {"x": 1}, {"answered_by": "alice"}))
    store.record_audit(AuditEntry(eid, "note_added", "cli", "bob", data={"ok": True}))
    with sqlite3.connect(tmp_path / "t.db") as raw:
        raw.execute("UPDATE audit_log SET data = x'7b6e6f' WHERE actor = 'alice'")
    first, second = store.list_audit(eid)
    assert first.actor == "alice" and "cannot be read" in first.data["unreadable"]
    assert second.data == {"ok": True}
    store.close()


def test_an_entry_the_store_cannot_write_leaves_the_answer_unstored_too(store):
    from tether.errors import SerializationError

    eid = _paused(store)
    pending = store.get_pending_interrupt(eid)
    unstorable = AuditEntry(eid, "approved", "cli", "alice", data=object())
    value: dict[str, Any] = {"approved": True, "data": None, "metadata": {}}
    with pytest.raises(SerializationError):
        store.answer_interrupt(eid, value, checkpoint_id=pending.checkpoint_id, audit=unstorable)
    with pytest.raises(SerializationError):
        store.claim_interrupt(
            eid, owner="me", resume_value=value, lease_seconds=30, audit=unstorable
        )
    still = store.get_pending_interrupt(eid)
    assert still.resume_value is None and still.claimed_by is None
    assert store.get_run(eid).status == "paused"
    assert store.list_audit(eid) == []
