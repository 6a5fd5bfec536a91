"""Stored timestamps that cannot be read as times, as a hand edit, a bad restore or a foreign
writer leaves them: on Postgres ``infinity``, ``-infinity`` and a year past 9999 (valid
``timestamptz`` values that psycopg refuses to turn into a Python datetime); on SQLite (which
stores whatever it is given) text, a number of seconds past year 9999, and infinities."""

from __future__ import annotations

from typing import Any

from tests.hostile.conftest import raw_sql
from tests.support.chains import orders_chain
from tether import Checkpointer

RUN_TIMES = ("lease_expires_at", "created_at", "updated_at", "finished_at")
PENDING_TIMES = ("created_at", "claim_expires_at", "due_at")


def unreadable_times(store: Any) -> list[Any]:
    """The unreadable timestamps of ``store``'s backend."""
    if hasattr(store, "path"):
        return ["yesterday", 1e300, float("inf"), -1e300]
    return ["infinity", "-infinity", "20000-01-01 00:00:00+00"]


def paused(store: Checkpointer, eid: str) -> str:
    """A run of ``orders`` paused at ``review`` (seqs 1 and 2: validate, charge; 3: paused)."""
    result = orders_chain(store).run({"order_id": eid, "amount": 500}, execution_id=eid)
    assert result.status == "paused"
    return eid


def set_time(
    store: Any, table: str, column: str, value: Any, eid: str, seq: int | None = None
) -> None:
    """``UPDATE table SET column = value`` for one run's row(s) (one checkpoint with ``seq``),
    behind tether's back."""
    where = "execution_id = ?" + ("" if seq is None else " AND seq = ?")
    params = (value, eid) if seq is None else (value, eid, seq)
    raw_sql(store)(f"UPDATE {{t}}{table} SET {column} = ? WHERE {where}", params)
