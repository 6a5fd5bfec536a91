"""Credentials are configuration, never state: nothing an agent writes holds its API key."""

from __future__ import annotations

from pathlib import Path

from tests.agent.agents import make_agent
from tests.llm.stub_server import StubServer
from tether.llm.openai import OpenAIChat
from tether.store.sqlite import SQLiteCheckpointer

SECRET = "sk-secret-4f9c2a7e1b"


async def test_api_key_is_never_written_to_the_database(tmp_path: Path) -> None:
    db = tmp_path / "tether.db"
    store = SQLiteCheckpointer(db)
    with StubServer() as stub:
        stub.script(
            [
                {"tool_calls": [{"name": "approve", "arguments": {"amount": 900}}]},
                {"text": "done"},
            ]
        )
        llm = OpenAIChat("gpt-test", api_key=SECRET, base_url=stub.url + "/v1", max_retries=0)
        agent = make_agent("plain", llm, store)
        assert (await agent.arun("refund", execution_id="s1")).status == "paused"
        from tether.interrupt import Resume

        assert (await agent.aresume("s1", Resume(True))).status == "completed"
        assert stub.log[0].headers["authorization"] == f"Bearer {SECRET}"
    store.close()
    written = b"".join(p.read_bytes() for p in tmp_path.glob("tether.db*"))
    assert written and SECRET.encode() not in written
    assert b"sk-secret" not in written
