"""Rows damaged behind tether's back, as a bad migration, a hand edit or disk trouble leaves
them: one run's input that is not JSON, a pending interrupt's context that is not JSON, and on
SQLite (which stores what it is given) a runner name that is not UTF-8 and text in a
timestamp. Postgres refuses the last two itself."""

from __future__ import annotations

from dataclasses import dataclass

from tests.hostile.conftest import raw_sql
from tests.support.chains import orders_chain
from tether import Checkpointer


@dataclass
class Damaged:
    good: list[str]
    bad_input: str
    bad_context: str
    bad_name: str | None  # SQLite only
    bad_time: str | None  # SQLite only

    @property
    def damaged(self) -> list[str]:
        return [e for e in (self.bad_input, self.bad_context, self.bad_name, self.bad_time) if e]


def paused(store: Checkpointer, eid: str) -> str:
    result = orders_chain(store).run({"order_id": eid, "amount": 500}, execution_id=eid)
    assert result.status == "paused"
    return eid


def damage(store: Checkpointer) -> Damaged:
    """Five paused runs, two good, the others damaged one way each."""
    sql = raw_sql(store)
    good = [paused(store, "good-1"), paused(store, "good-2")]
    bad_input = paused(store, "bad-input")
    sql("UPDATE {t}runs SET input = ? WHERE execution_id = ?", (b"{not json", bad_input))
    bad_context = paused(store, "bad-context")
    sql(
        "UPDATE {t}pending_interrupts SET context = ? WHERE execution_id = ?",
        (b"\x00\xffgarbage", bad_context),
    )
    bad_name = bad_time = None
    if hasattr(store, "path"):
        bad_name = paused(store, "bad-name")
        not_utf8 = "UPDATE runs SET runner_name = CAST(x'6f72ff' AS TEXT) WHERE execution_id = ?"
        sql(not_utf8, (bad_name,))
        bad_time = paused(store, "bad-time")
        sql("UPDATE runs SET created_at = 'yesterday' WHERE execution_id = ?", (bad_time,))
    return Damaged(good, bad_input, bad_context, bad_name, bad_time)
