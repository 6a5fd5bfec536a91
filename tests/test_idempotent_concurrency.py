"""@idempotent under concurrency inside one run (docs/design.md §6): calls with one key that
overlap (``asyncio.gather``, threads carrying the run's context) run the body once; a thread
that does not carry the run's context is warned about instead of silently running the body
again on resume."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tether import Chain, Resume, idempotent, interrupt


async def test_overlapping_calls_with_one_key_in_a_gather_run_the_body_once(store):
    ledger: list[str] = []

    @idempotent
    async def charge(order: str) -> str:
        ledger.append(order)
        await asyncio.sleep(0.05)  # both calls are in flight at once
        return f"rcpt-{order}-{len(ledger)}"

    chain = Chain("idem-gather", store)

    async def node(state):
        receipts = await asyncio.gather(charge("A"), charge("A"), charge("B"))
        return {"receipts": receipts}

    chain.add_node("pay", node)
    result = await chain.arun({})
    assert result.status == "completed", result.error
    assert sorted(ledger) == ["A", "B"]
    a, a_again, b = result.state["receipts"]
    assert a == a_again and a.startswith("rcpt-A-") and b.startswith("rcpt-B-")


def test_threads_carrying_the_run_run_the_body_once_across_a_resume(store):
    ledger: list[str] = []
    lock = threading.Lock()

    @idempotent
    def charge(order: str) -> str:
        with lock:
            ledger.append(order)
        time.sleep(0.05)  # the calls on the pool overlap
        return f"rcpt-{order}"

    chain = Chain("idem-threads", store)

    def node(state):
        with ThreadPoolExecutor(4) as pool:
            futures = [
                pool.submit(contextvars.copy_context().run, charge, order)
                for order in ("A", "A", "B", "B")
            ]
            receipts = [f.result() for f in futures]
        answer = interrupt("ship?", receipts)
        return {"receipts": receipts, "ok": answer.approved}

    chain.add_node("pay", node)
    paused = chain.run({})
    assert paused.status == "paused", paused.error
    done = chain.resume(paused.execution_id, Resume(True))  # the node runs again from its top
    assert done.status == "completed", done.error
    assert sorted(ledger) == ["A", "B"]
    assert done.state["receipts"] == ["rcpt-A", "rcpt-A", "rcpt-B", "rcpt-B"]


async def test_a_call_waiting_on_one_that_raised_runs_the_body_itself(store):
    attempts: list[int] = []

    @idempotent(key="flaky")
    async def flaky() -> str:
        attempts.append(len(attempts))
        await asyncio.sleep(0.05)
        if len(attempts) == 1:
            raise RuntimeError("provider said 503")
        return "ok"

    chain = Chain("idem-retry", store)

    async def node(state):
        first, second = await asyncio.gather(flaky(), flaky(), return_exceptions=True)
        return {"first": repr(first), "second": second}

    chain.add_node("n", node)
    result = await chain.arun({})
    assert result.status == "completed", result.error
    # Nothing was cached by the call that raised, so the one behind it ran the body, as a call
    # made after it would have.
    assert attempts == [0, 1]
    assert "503" in result.state["first"] and result.state["second"] == "ok"


def test_a_call_nested_in_a_body_holding_its_key_goes_ahead_instead_of_waiting(store):
    calls: list[str] = []

    @idempotent(key="shared")
    def inner() -> str:
        calls.append("inner")
        return "inner"

    @idempotent(key="shared")
    def outer() -> str:
        calls.append("outer")
        return inner()  # same key, inside the body that holds it: no deadlock

    chain = Chain("idem-nested", store)
    chain.add_node("n", lambda state: {"v": outer()})
    result = chain.run({})
    assert result.status == "completed", result.error
    assert calls == ["outer", "inner"]


def test_a_call_from_a_thread_without_the_runs_context_warns_how_to_pass_it(store):
    ledger: list[str] = []

    @idempotent
    def charge(order: str) -> str:
        ledger.append(order)
        return order

    chain = Chain("idem-lost-context", store)

    def node(state):
        with ThreadPoolExecutor(1) as pool:
            receipt = pool.submit(charge, "A").result()  # the pool's thread has no run
        return {"receipt": receipt}

    chain.add_node("pay", node)
    with pytest.warns(RuntimeWarning) as caught:
        result = chain.run({})
    assert result.status == "completed", result.error
    message = str(caught[0].message)
    assert "charge" in message and "outside any tether run" in message
    assert "copy_context().run" in message and "asyncio.to_thread" in message
    assert ledger == ["A"]


def test_outside_any_run_with_no_run_active_there_is_no_warning(recwarn):
    @idempotent
    def f(x: int) -> int:
        return x + 1

    assert f(1) == 2
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


async def test_a_sync_call_never_blocks_on_an_async_call_holding_its_key(store):
    # An async tool holds the key and needs the event loop; a sync node call with the same
    # key, made on the loop's thread, must not wait for it (it would wait forever).
    calls: list[str] = []
    release = asyncio.Event()

    @idempotent(key="k")
    async def slow() -> str:
        calls.append("async")
        await release.wait()
        return "async"

    @idempotent(key="k")
    def quick() -> str:
        calls.append("sync")
        return "sync"

    chain = Chain("idem-mixed", store)

    async def node(state):
        task = asyncio.ensure_future(slow())
        await asyncio.sleep(0.01)  # the async call holds the key now
        got = await asyncio.wait_for(asyncio.to_thread(quick), timeout=5)
        release.set()
        return {"sync": got, "async": await task}

    chain.add_node("n", node)
    result = await chain.arun({})
    assert result.status == "completed", result.error
    assert calls == ["async", "sync"]


async def test_a_sync_call_on_the_loops_thread_never_waits_for_a_thread_that_needs_the_loop(
    store,
):
    # The holder, on a worker thread, bridges to an async client on the drive's loop; a call
    # with the same key made on the loop's thread must not block that loop (a deadlock).
    loop_box: list[asyncio.AbstractEventLoop] = []
    loop_thread: list[int] = []

    async def fetch() -> str:
        await asyncio.sleep(0.05)
        return "data"

    @idempotent(key="lookup")
    def lookup() -> str:
        if threading.get_ident() == loop_thread[0]:  # on the drive's loop: no bridge needed
            return "direct"
        return asyncio.run_coroutine_threadsafe(fetch(), loop_box[0]).result(timeout=10)

    chain = Chain("idem-bridge", store)

    async def node(state):
        loop_box.append(asyncio.get_running_loop())
        loop_thread.append(threading.get_ident())
        bridged = asyncio.ensure_future(asyncio.to_thread(lookup))  # holds the key
        await asyncio.sleep(0.02)
        direct = lookup()
        return {"bridged": await bridged, "direct": direct}

    chain.add_node("n", node)
    started = time.monotonic()
    result = await asyncio.wait_for(chain.arun({}), timeout=30)
    assert result.status == "completed", result.error
    assert time.monotonic() - started < 5
    assert result.state["bridged"] == "data"


async def test_a_step_abandoned_at_its_timeout_gives_up_its_key_so_a_resume_runs_the_body(
    store,
):
    stuck = threading.Event()
    calls: list[int] = []

    @idempotent(key="charge-1")
    def charge() -> str:
        calls.append(len(calls))
        if len(calls) == 1:
            stuck.wait(30)  # the first attempt hangs (a stuck HTTP call)
        return "rcpt"

    chain = Chain("idem-abandoned", store)
    chain.add_node("pay", lambda state: {"r": charge()}, timeout_seconds=0.5)
    try:
        failed = await chain.arun({})
        assert failed.status == "failed", failed.error
        again = await asyncio.wait_for(chain.aresume(failed.execution_id), timeout=30)
        assert again.status == "completed", again.error
        assert again.state["r"] == "rcpt" and calls == [0, 1]
    finally:
        stuck.set()
