"""A tool_call row stores its arguments once (in the history its state holds) and still hands
back ``node_input = {"tool_call_id", "name", "arguments"}`` exactly as written, on every read
path and every backend (issue 8, W5)."""

from __future__ import annotations

from typing import Any

from tether.agent import Agent, tool
from tether.interrupt import Resume, interrupt
from tether.testing import ScriptedLLM

BIG = "x" * 500


def _texts(n: int) -> list[str]:
    return [f"{i}:{BIG}" for i in range(n)]


def _agent(store: Any, llm: ScriptedLLM, seen: list[str]) -> Agent:
    @tool
    def note(text: str) -> str:
        """Keep a note."""
        seen.append(text)
        return f"noted {len(text)}"

    @tool
    def approve(text: str) -> str:
        """Needs a human."""
        answer = interrupt("sign-off", {"size": len(text)})
        seen.append(text)
        return f"approved={answer.approved}"

    return Agent("notes", llm=llm, tools=[note, approve], checkpointer=store)


def _node_input_bytes(store: Any, eid: str) -> dict[str, int]:
    """Stored length of the node_input column per checkpoint_id."""
    if hasattr(store, "schema"):  # Postgres
        import psycopg

        from tests.conftest import PG_DSN

        sql = f'SELECT checkpoint_id, length(node_input) FROM "{store.schema}".checkpoints'
        with psycopg.connect(PG_DSN) as conn:
            return {
                cid: n or 0 for cid, n in conn.execute(sql + " WHERE execution_id = %s", (eid,))
            }
    import sqlite3

    lite = sqlite3.connect(store.path)
    try:
        sql = "SELECT checkpoint_id, length(node_input) FROM checkpoints WHERE execution_id = ?"
        return {cid: n or 0 for cid, n in lite.execute(sql, (eid,))}
    finally:
        lite.close()


def _expected_inputs(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"tool_call_id": c["id"], "name": c["name"], "arguments": c["arguments"]}
        for m in messages
        for c in m.get("tool_calls", ())
    ]


async def test_tool_call_rows_hand_back_their_arguments_but_store_them_once(store: Any) -> None:
    texts = _texts(4)
    script: list[Any] = [
        [
            {"name": "note", "arguments": {"text": texts[0]}},
            {"name": "note", "arguments": {"text": texts[1]}},
        ],
        [{"name": "note", "arguments": {"text": texts[2]}}],
        "done",
    ]
    seen: list[str] = []
    result = await _agent(store, ScriptedLLM(script), seen).arun(texts[3], execution_id="w1")
    assert result.status == "completed" and seen == texts[:3]

    rows = [cp for cp in store.list("w1") if cp.step_type == "tool_call"]
    final = store.get_last("w1").state_snapshot["messages"]
    assert [cp.node_input for cp in rows] == _expected_inputs(final)
    assert [cp.node_input["arguments"]["text"] for cp in rows] == texts[:3]
    for cp in rows:
        assert store.get_checkpoint("w1", cp.checkpoint_id).node_input == cp.node_input
        at = store.get_last("w1", before_seq=cp.seq + 1, agent_path_prefix=cp.agent_path)
        assert at.checkpoint_id == cp.checkpoint_id and at.node_input == cp.node_input
    sizes = _node_input_bytes(store, "w1")
    # the second call of a turn too: its arguments sit a few messages back in the history
    assert all(sizes[cp.checkpoint_id] < 200 for cp in rows), sizes


async def test_fork_from_a_tool_call_row_reruns_the_tool_with_the_stored_arguments(
    store: Any,
) -> None:
    texts = _texts(3)
    script: list[Any] = [
        [
            {"name": "note", "arguments": {"text": texts[0]}},
            {"name": "note", "arguments": {"text": texts[1]}},
        ],
        "done",
    ]
    await _agent(store, ScriptedLLM(script), []).arun(texts[2], execution_id="f1")
    second = [cp for cp in store.list("f1") if cp.step_type == "tool_call"][1]

    seen: list[str] = []
    llm = ScriptedLLM(script, resume_aware=True)
    branch = await _agent(store, llm, seen).afork("f1", second.checkpoint_id, new_execution_id="f2")
    assert branch.status == "completed" and seen == [texts[1]]
    origin = store.list("f2")[0]
    assert origin.step_type == "fork_origin"
    assert origin.node_input["source"]["node_input"] == second.node_input
    assert store.get_checkpoint("f2", origin.checkpoint_id).node_input == origin.node_input


async def test_a_paused_tool_gets_its_arguments_back_on_resume(store: Any) -> None:
    texts = _texts(2)
    script: list[Any] = [[{"name": "approve", "arguments": {"text": texts[0]}}], "done"]
    first = await _agent(store, ScriptedLLM(script), []).arun(texts[1], execution_id="p1")
    assert first.status == "paused"
    paused = store.get_last("p1")
    assert paused.status == "interrupted"
    assert paused.node_input["arguments"] == {"text": texts[0]}
    assert paused.node_input["answers"] == [] and paused.node_input["name"] == "approve"

    seen: list[str] = []
    llm = ScriptedLLM(script, resume_aware=True)
    done = await _agent(store, llm, seen).aresume("p1", Resume(True))
    assert done.status == "completed" and seen == [texts[0]]
    assert next(m for m in llm.calls[0] if m["role"] == "tool")["content"] == "approved=True"
