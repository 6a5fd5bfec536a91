"""Ids, names, keys and reasons with quotes, ``;``, ``%``, NUL and 10,000 characters; a 50 MB
state. On both backends they round-trip unchanged through run, pause, resume and fork."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.hostile.conftest import counts
from tests.hostile.strings import HOSTILE
from tether import Chain, Resume, idempotent, interrupt

fired: list[str] = []


@idempotent(key=lambda tag: tag)
def effect(tag: str) -> str:
    fired.append(tag)
    return tag


def odd_chain(store: Any, text: str) -> Chain:
    chain = Chain(f"chain {text}", store)
    first, second = f"first {text}", f"second {text}"

    def ask(state: dict[str, Any]) -> dict[str, Any]:
        answer = interrupt(f"reason {text}", {text: text})
        return {f"answer {text}": answer.data, "effect": effect(f"key {text}")}

    chain.add_node(first, lambda s: {text: text, "nested": {text: [text]}})
    chain.add_node(second, ask)
    chain.add_edge(first, second)
    return chain


@pytest.mark.parametrize("text", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_strings_round_trip_through_run_pause_resume_and_fork(
    store: Any, text: str
) -> None:
    fired.clear()
    chain = odd_chain(store, text)
    eid = f"run {text}"
    paused = chain.run({"input": text}, execution_id=eid)
    assert paused.status == "paused" and paused.execution_id == eid
    pending = store.get_pending_interrupt(eid)
    assert pending.reason == f"reason {text}" and pending.context == {text: text}
    assert pending.node_id == f"second {text}"
    assert [r.execution_id for r in store.list_runs() if r.execution_id == eid] == [eid]
    assert store.get_run(eid).runner_name == f"chain {text}"

    done = chain.resume(eid, Resume(True, data=text))
    assert done.status == "completed"
    assert done.output[text] == text and done.output[f"answer {text}"] == text
    assert done.output["nested"] == {text: [text]} and done.output["effect"] == f"key {text}"
    assert fired == [f"key {text}"]
    assert list(store.list_idempotent(eid).values()) == [f"key {text}"]

    first_row = store.list(eid)[0]
    branch = chain.fork(
        eid,
        first_row.checkpoint_id,
        new_execution_id=f"fork {text}",
        state_updates={text: "changed"},
    )
    assert branch.status == "paused" and branch.execution_id == f"fork {text}"
    assert store.get_run(f"fork {text}").parent_checkpoint_id == first_row.checkpoint_id
    assert store.get_last(eid).state_snapshot[text] == text  # the original is untouched


def test_a_50_mb_state_is_stored_and_read_back_whole(store: Any) -> None:
    blob = "0123456789abcdef" * (50 * 1024 * 1024 // 16)
    chain = Chain("big", store)
    chain.add_node("make", lambda s: {"blob": blob})
    chain.add_node("ask", lambda s: {"ok": interrupt("size?", {"n": len(s["blob"])}).approved})
    chain.add_edge("make", "ask")
    started = time.monotonic()
    eid = chain.run({}).execution_id
    assert store.get_pending_interrupt(eid).context == {"n": 50 * 1024 * 1024}
    done = chain.resume(eid, Resume(True))
    assert done.status == "completed" and done.output["blob"] == blob
    assert store.get_last(eid).state_snapshot["blob"] == blob
    assert time.monotonic() - started < 60
    assert counts(store)["checkpoints"] == 4  # make, ask paused, ask done, run_end
