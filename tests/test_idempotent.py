"""@idempotent (DESIGN section 6)."""

from __future__ import annotations

import socket

from tether import Chain, Resume, SerializationError, current_idempotency_key, idempotent, interrupt


def test_outside_a_run_it_is_a_plain_call():
    calls = []

    @idempotent
    def f(x):
        calls.append(x)
        return x * 2

    assert f(2) == 4 and f(2) == 4 and calls == [2, 2]


def test_in_a_reentered_node_the_body_runs_once_and_none_is_a_hit(store):
    calls = []

    @idempotent
    def send(to: str, body: str = "hi"):
        calls.append(to)
        return None

    chain = Chain("idem", store)

    def node(state):
        send("a@x", body="hi")
        send("a@x")  # same bound arguments -> same key
        answer = interrupt("ok?", None)
        return {"ok": answer.approved}

    chain.add_node("n", node)
    paused = chain.run({})
    chain.resume(paused.execution_id, Resume(True))
    assert calls == ["a@x"]
    assert list(store.list_idempotent(paused.execution_id).values()) == [None]


async def test_async_functions_work(store):
    calls = []

    @idempotent
    async def charge(amount: int) -> dict:
        calls.append(amount)
        return {"charged": amount, "key": current_idempotency_key()}

    chain = Chain("idem-async", store)

    async def node(state):
        first = await charge(5)
        second = await charge(5)
        assert first["charged"] == second["charged"] == 5
        interrupt("ok?", None)
        return {"receipt": first}

    chain.add_node("n", node)
    paused = await chain.arun({})
    done = await chain.aresume(paused.execution_id, Resume(True))
    assert calls == [5]
    assert done.output["receipt"]["key"] == charge.idempotency_key(5)
    assert len(done.output["receipt"]["key"]) == 64


def test_key_override_and_different_runs_do_not_share(store):
    calls = []

    @idempotent(key=lambda order_id, amount: f"charge:{order_id}")
    def charge(order_id, amount):
        calls.append((order_id, amount))
        return amount

    chain = Chain("idem-key", store)
    chain.add_node("n", lambda s: {"a": charge("o1", 1), "b": charge("o1", 2)})
    assert chain.run({}).output == {"a": 1, "b": 1}
    assert chain.run({}).output == {"a": 1, "b": 1}
    assert calls == [("o1", 1), ("o1", 1)]


def test_arguments_without_canonical_encoding_raise_a_clear_error(store):
    @idempotent
    def use(sock):
        return 1

    chain = Chain("idem-bad", store)
    s = socket.socket()
    try:
        chain.add_node("n", lambda st: {"v": use(s)})
        result = chain.run({})
    finally:
        s.close()
    assert result.status == "failed"
    assert isinstance(result.error, SerializationError)
    assert "socket" in str(result.error) and "key=" in str(result.error)
