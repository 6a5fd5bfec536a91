"""A stored timestamp that cannot be read as a time (Postgres ``infinity``, a year past 9999;
SQLite text or a number out of range) spoils only its own row: listings mark the row damaged
naming the column, the others read normally, and reading that row by id is a
``CorruptRecordError`` naming the run and the column, never psycopg's ``DataError`` (worded as
if the server refused) or a raw ``ValueError``/``OverflowError``. Both backends."""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

import pytest

from tests.hostile.conftest import counts, raw_sql
from tests.hostile.test_records import reopen
from tests.support.chains import orders_chain
from tests.support.times import (
    PENDING_TIMES,
    RUN_TIMES,
    paused,
    set_time,
    unreadable_times,
)
from tether import Resume
from tether._deadlines import apply_due
from tether.audit import AuditEntry
from tether.errors import CorruptRecordError
from tether.store import PendingQuery, RunsQuery


@pytest.mark.parametrize("column", RUN_TIMES)
def test_a_runs_unreadable_timestamp_is_listed_damaged_and_named_when_read_by_id(
    store: Any, column: str
) -> None:
    good, bad = paused(store, "good"), paused(store, "bad")
    for value in unreadable_times(store):
        set_time(store, "runs", column, value, bad)
        other = reopen(store)
        try:
            listed = {r.execution_id: r for r in other.list_runs_page(RunsQuery()).items}
            assert set(listed) == {good, bad}, value
            assert listed[good].damaged is None and listed[good].created_at is not None
            assert f"{column} unreadable" in (listed[bad].damaged or ""), (value, listed[bad])
            assert listed[bad].runner_name == "orders" and listed[bad].status == "paused"
            assert getattr(listed[bad], column) is None
            with pytest.raises(CorruptRecordError) as info:
                other.get_run(bad)
            assert info.value.execution_id == bad and column in str(info.value), value
            assert other.get_run(good).damaged is None
        finally:
            other.close()


@pytest.mark.parametrize("column", PENDING_TIMES)
def test_a_pending_unreadable_timestamp_is_listed_damaged_and_named_when_read_by_id(
    store: Any, column: str
) -> None:
    good, bad = paused(store, "good"), paused(store, "bad")
    for value in unreadable_times(store):
        set_time(store, "pending_interrupts", column, value, bad)
        other = reopen(store)
        try:
            page = other.list_pending_page(PendingQuery())
            listed = {e.pending.execution_id: e.pending for e in page.items}
            assert set(listed) == {good, bad}, value
            assert listed[good].damaged is None
            assert f"{column} unreadable" in (listed[bad].damaged or ""), (value, listed[bad])
            with pytest.raises(CorruptRecordError) as info:
                other.get_pending_interrupt(bad)
            assert info.value.execution_id == bad and column in str(info.value), value
        finally:
            other.close()


def test_a_checkpoints_unreadable_created_at_is_named_by_run_and_seq(store: Any) -> None:
    eid = paused(store, "bad")
    for value in unreadable_times(store):
        set_time(store, "checkpoints", "created_at", value, eid, seq=2)
        other = reopen(store)
        try:
            rows, damage = other.list_readable(eid)
            assert [cp.seq for cp in rows] == [1], value
            assert damage is not None and damage.seq == 2 and damage.execution_id == eid
            assert "created_at" in damage.message and f"{eid!r}, seq 2" in damage.message
            with pytest.raises(CorruptRecordError) as info:
                other.list(eid)
            assert info.value.execution_id == eid and "created_at" in str(info.value)
        finally:
            other.close()


def test_an_operation_that_needs_an_unreadable_run_time_is_refused_naming_it(store: Any) -> None:
    eid = paused(store, "bad")
    set_time(store, "runs", "created_at", unreadable_times(store)[0], eid)
    set_time(store, "checkpoints", "created_at", unreadable_times(store)[1], eid, seq=3)
    before = counts(store)
    with pytest.raises(CorruptRecordError) as info:
        orders_chain(store).resume(eid, Resume(True))
    assert info.value.execution_id == eid and "created_at" in str(info.value)
    assert counts(store) == before


def test_an_audit_entry_whose_time_cannot_be_read_is_listed_damaged_with_the_others(
    store: Any,
) -> None:
    eid = paused(store, "bad")
    for note in ("first", "second", "third"):
        store.record_audit(AuditEntry(eid, "cancelled", "cli", actor="ann", note=note))
    [(second,)] = raw_sql(store)(
        "SELECT entry_id FROM {t}audit_log WHERE note = 'second' AND execution_id = ?", (eid,)
    )
    for value in unreadable_times(store):
        raw_sql(store)("UPDATE {t}audit_log SET at = ? WHERE entry_id = ?", (value, second))
        other = reopen(store)
        try:
            entries = other.list_audit(eid)
            assert [e.note for e in entries] == ["first", "second", "third"], value
            assert [e.damaged is None for e in entries] == [True, False, True]
            damaged = entries[1]
            assert damaged.at is None and "at unreadable" in (damaged.damaged or "")
            assert damaged.as_dict()["damaged"] == damaged.damaged and damaged.actor == "ann"
            assert entries[0].at is not None  # a datetime keeps microseconds only: 1 s back
            since = other.list_audit(since=entries[0].at - datetime.timedelta(seconds=1))
            assert {e.note for e in since} >= {"first", "third"}
        finally:
            other.close()


def test_a_due_question_whose_time_cannot_be_read_never_stops_the_deadline_sweep(
    store: Any,
) -> None:
    good, bad = paused(store, "good"), paused(store, "bad")
    past: Any = time.time() - 3600 if hasattr(store, "path") else "2000-01-01 00:00:00+00"
    set_time(store, "pending_interrupts", "due_at", past, good)
    never: Any = -1e300 if hasattr(store, "path") else "-infinity"  # due since ever
    set_time(store, "pending_interrupts", "due_at", never, bad)
    due = {p.execution_id: p for p in store.due_interrupts(runner_names=None, limit=16)}
    assert set(due) == {good, bad}
    assert due[good].damaged is None and "due_at unreadable" in (due[bad].damaged or "")
    before = counts(store)
    asyncio.run(apply_due(store, runner_names=None))  # the good one has no deadline: kept
    assert counts(store) == before
