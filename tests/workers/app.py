"""Runners the worker tests run in `tether worker` subprocesses (``--app tests.workers.app``).

The runners open their store from ``TETHER_DATABASE_URL`` (the CLI sets it from ``--db``).
Side effects go to a ``ledger`` table in the run's database (or in ``TETHER_TEST_LEDGER_URL``'s,
a Postgres schema that stays up while the run's server restarts), through ``@idempotent`` with
the derived idempotency key as the "provider's" key: a body that runs again after a crash
(between its effect and the cache commit) is counted in ``calls`` but never makes a second row.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from typing import Any

from tether import Chain, Registry, _lease, current_idempotency_key, idempotent, interrupt
from tether.errors import StoreUnavailableError

NODES = ("n1", "n2", "n3", "n4", "n5")
STEP_SECONDS = float(os.environ.get("TETHER_TEST_STEP_SECONDS", "0.01"))
LEDGER_DDL = (
    "CREATE TABLE IF NOT EXISTS {schema}.ledger (key text PRIMARY KEY, execution_id text, "
    "node text, calls integer NOT NULL DEFAULT 1)"
)


def _connect() -> Any:
    url = os.environ.get("TETHER_TEST_LEDGER_URL") or os.environ["TETHER_DATABASE_URL"]
    if url.startswith("sqlite:///"):
        import sqlite3

        # Shared with steps that run in threads of their own (a node with a timeout).
        conn = sqlite3.connect(
            url[len("sqlite:///") :], timeout=30, isolation_level=None, check_same_thread=False
        )
        conn.execute(LEDGER_DDL.format(schema="main"))
        return conn, "main", "?"
    import psycopg

    dsn, _, query = url.partition("?")
    schema = dict(p.split("=", 1) for p in query.split("&") if p)["schema"]
    return psycopg.connect(dsn, autocommit=True), f'"{schema}"', "%s"


_conn: Any = None


def _ledger(key: str, eid: str, node: str) -> None:
    global _conn
    if _conn is None:
        _conn = _connect()
    conn, schema, mark = _conn
    conn.execute(
        f"INSERT INTO {schema}.ledger (key, execution_id, node) VALUES ({mark}, {mark}, {mark}) "
        "ON CONFLICT (key) DO UPDATE SET calls = ledger.calls + 1",
        (key, eid, node),
    )


@idempotent
def effect(eid: str, node: str) -> str:
    key = current_idempotency_key()
    assert key is not None
    _ledger(key, eid, node)
    return key


def _owner() -> str:
    lease = _lease.current()
    return lease.owner if lease is not None else "none"


def _node(name: str) -> Any:
    def run(state: dict[str, Any]) -> dict[str, Any]:
        time.sleep(STEP_SECONDS)
        effect(state["eid"], name)
        return {f"{name}_owner": _owner()}

    run.__name__ = name
    return run


five = Chain("five")
for _name in NODES:
    five.add_node(_name, _node(_name))
for _a, _b in itertools.pairwise(NODES):
    five.add_edge(_a, _b)


@idempotent
async def aeffect(eid: str, node: str) -> str:
    key = current_idempotency_key()
    assert key is not None
    _ledger(key, eid, node)  # one short statement on the loop
    return key


def _anode(name: str) -> Any:
    # Steps that wait without holding the worker's event loop (as an LLM or HTTP call does),
    # so a worker's concurrent runs overlap instead of taking turns at a sleeping loop.
    async def run(state: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(STEP_SECONDS)
        await aeffect(state["eid"], name)
        return {f"{name}_owner": _owner()}

    run.__name__ = name
    return run


five_async = Chain("five_async")
for _name in NODES:
    five_async.add_node(_name, _anode(_name))
for _a, _b in itertools.pairwise(NODES):
    five_async.add_edge(_a, _b)


def _slow(state: dict[str, Any]) -> dict[str, Any]:
    time.sleep(float(os.environ.get("TETHER_TEST_SLOW_SECONDS", "1.0")))
    return {f"{state.get('step', 0)}": _owner(), "step": state.get("step", 0) + 1}


slow = Chain("slow")
slow.add_node("s1", _slow)
slow.add_node("s2", _slow)
slow.add_node("s3", _slow)
slow.add_edge("s1", "s2")
slow.add_edge("s2", "s3")


def _crash(state: dict[str, Any]) -> dict[str, Any]:
    os.kill(os.getpid(), signal.SIGKILL)
    return {}


crashy = Chain("crashy")
crashy.add_node("boom", _crash)


def _ask(state: dict[str, Any]) -> dict[str, Any]:
    answer = interrupt("approve", {"amount": state.get("amount", 0)})
    return {"approved": answer.approved, "by": _owner()}


approval = Chain("approval")
approval.add_node("ask", _ask)
approval.add_node("done", lambda state: {"done": True})
approval.add_edge("ask", "done")


def _store_fails_once(state: dict[str, Any]) -> dict[str, Any]:
    # The first drive of each run fails the way a store that went away fails a step (an
    # @idempotent cache write, say): the StoreError escapes the executor and the drive raises.
    marks = os.environ["TETHER_TEST_MARKS"]
    try:
        os.close(os.open(os.path.join(marks, state["eid"]), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return {"done_by": _owner()}
    raise StoreUnavailableError(f"the store went away under {state['eid']} (first drive)")


flaky = Chain("flaky")
flaky.add_node("once", _store_fails_once)


app = Registry(five, five_async, slow, crashy, approval, flaky)
