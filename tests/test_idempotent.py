"""@idempotent (docs/design.md §6)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

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


async def test_a_result_that_cannot_be_cached_fails_the_step_and_the_body_never_runs_again(store):
    """The body ran (its effect happened) before tether could find its result unstorable: the
    step fails with the result's path, the run is ``failed`` (not stuck ``running``), and a
    resume raises the same error instead of running the body again. Sync and async bodies."""
    calls = []

    class Local:  # not JSON: neither a module-level class nor plain data
        pass

    @idempotent
    def sync_effect(n: int):
        calls.append(("sync", n))
        return {"handle": Local()}

    @idempotent
    async def async_effect(n: int):
        calls.append(("async", n))
        return [Local()]

    for name, node, path in (
        ("sync", lambda s: {"r": sync_effect(1)}, 'result["handle"]'),
        ("async", lambda s: _awaiting(async_effect(2)), "result[0]"),
    ):
        chain = Chain(f"idem-lost-{name}", store)
        chain.add_node("n", node)
        failed = await chain.arun({})
        assert failed.status == "failed" and isinstance(failed.error, SerializationError)
        assert failed.error.path == path and "does not run again" in str(failed.error)
        assert store.get_run(failed.execution_id).status == "failed"
        again = await chain.aresume(failed.execution_id)
        assert again.status == "failed" and "does not run again" in str(again.error)
    assert calls == [("sync", 1), ("async", 2)]


async def _awaiting(coro):
    return {"r": await coro}


def _effect(sent: list, what: str, order: str, result: str) -> str:
    sent.append((what, order))
    return result


def _poster(channel: str, sent: list):
    @idempotent
    def post(text: str) -> str:
        sent.append((channel, text))
        return f"posted to {channel}"

    return post


def test_two_functions_of_one_qualified_name_are_two_effects(store):
    """Closures a factory made with other captured values, and two lambdas of one module
    share their qualified name: each still runs its own body once."""
    sent: list = []
    slack, pager = _poster("slack", sent), _poster("pager", sent)
    refund = idempotent(lambda order: _effect(sent, "refund", order, "refunded"))
    cancel = idempotent(lambda order: _effect(sent, "cancel", order, "cancelled"))
    chain = Chain("idem-names", store)

    def node(state):
        out = [slack("approved"), pager("approved"), refund("A-1"), cancel("A-1")]
        again = [slack("approved"), pager("approved"), refund("A-1"), cancel("A-1")]
        assert again == out
        return {"out": out}

    chain.add_node("n", node)
    result = chain.run({})
    assert result.state["out"] == ["posted to slack", "posted to pager", "refunded", "cancelled"]
    effects = [("slack", "approved"), ("pager", "approved"), ("refund", "A-1"), ("cancel", "A-1")]
    assert sent == effects
    assert len(store.list_idempotent(result.execution_id)) == 4


def test_a_closure_made_again_on_reentry_keeps_its_key_even_if_it_changes_what_it_captured(store):
    """The re-entered step makes its closures anew: the same captured values give the same
    key, and a captured list the body appends to counts by its type only (so a cache hit,
    which skips the body, does not change the next call's key)."""
    calls: list = []
    chain = Chain("idem-reentry", store)

    def node(state):
        done: list = []

        @idempotent
        def send(to: str) -> str:
            done.append(to)
            calls.append(to)
            return to

        send("a")
        send("b")
        interrupt("ok?", None)
        return {"done": True}

    chain.add_node("n", node)
    paused = chain.run({})
    assert chain.resume(paused.execution_id, Resume(True)).status == "completed"
    assert calls == ["a", "b"]


def test_default_keys_are_the_same_in_another_process():
    """Keys of a module-level function, a factory's closure and a lambda, from a fresh
    interpreter (another hash seed): a resume in another process must find them."""
    script = (
        "import json, tests.test_idempotent as t; "
        "print(json.dumps([t._module_level.idempotency_key(1), "
        "t._poster('slack', []).idempotency_key('x'), t._lambda.idempotency_key(2)]))"
    )
    here = [
        _module_level.idempotency_key(1),
        _poster("slack", []).idempotency_key("x"),
        _lambda.idempotency_key(2),
    ]
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "random"},
    )
    assert json.loads(out.stdout) == here
    assert len(set(here)) == 3


@idempotent
def _module_level(n: int) -> int:
    return n


_lambda = idempotent(lambda n: n)


def test_a_module_level_function_keeps_the_key_earlier_versions_stored():
    import hashlib

    from tether import serde

    name = f"{__name__}._module_level"
    expected = hashlib.sha256(name.encode() + b"\0" + serde.canonical_dumps({"n": 1})).hexdigest()
    assert _module_level.idempotency_key(1) == expected
