"""An ``execution_id`` given to start a run (``run``, ``fork``'s ``new_execution_id``,
``enqueue``) is a non-empty str or ``None``; anything else is refused with
``ConfigurationError`` naming it, before a run exists. An empty id used to start a run under a
fresh random id (so a retried ``run(execution_id=order_id)`` with an empty ``order_id`` started
a second run), and bytes or an int were stored as they were (bytes made a damaged row)."""

from __future__ import annotations

from typing import Any

import pytest

import tether
from tests.hostile.conftest import counts
from tether import Agent, Chain
from tether.errors import ConfigurationError
from tether.testing import ScriptedLLM

BAD_IDS = ["", 42, b"run-1"]


def _chain(store: Any) -> Chain:
    chain = Chain("ids", store)
    chain.add_node("a", lambda s: {"a": 1})
    return chain


@pytest.mark.parametrize("eid", BAD_IDS, ids=["empty", "int", "bytes"])
def test_a_run_fork_or_enqueue_with_an_execution_id_that_is_not_a_non_empty_str_is_refused(
    store: Any, eid: Any
) -> None:
    done = _chain(store).run({}, execution_id="good")
    before = counts(store)
    starts = {
        "chain.run": lambda: _chain(store).run({}, execution_id=eid),
        "agent.run": lambda: Agent("ids-agent", llm=ScriptedLLM(["hi"]), checkpointer=store).run(
            "hello", execution_id=eid
        ),
        "fork": lambda: _chain(store).fork(done.execution_id, new_execution_id=eid),
        "enqueue": lambda: tether.enqueue(store, "ids", {}, execution_id=eid),
    }
    for verb, start in starts.items():
        with pytest.raises(ConfigurationError, match="execution_id") as info:
            start()
        assert repr(eid) in str(info.value), (verb, info.value)
    assert counts(store) == before


@pytest.mark.parametrize("priority", ["high", 2**31, -(2**31) - 1, 1.5, True, None])
def test_enqueue_with_a_priority_outside_the_32_bit_int_range_is_refused_on_both_backends(
    store: Any, priority: Any
) -> None:
    # 2**40 was stored on SQLite and refused by Postgres as a RecordRejectedError (a store
    # error, the CLI's exit 5); "high" and None were a ValueError / TypeError.
    _chain(store).run({}, execution_id="good")
    before = counts(store)
    with pytest.raises(ConfigurationError, match="priority must be an int") as info:
        tether.enqueue(store, "ids", {}, priority=priority)
    assert repr(priority) in str(info.value)
    assert counts(store) == before
    for edge in (2**31 - 1, -(2**31)):
        tether.enqueue(store, "ids", {}, priority=edge)
