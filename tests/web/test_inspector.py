"""The run inspector on the run page (both backends, through Starlette's test client): an
agent run's conversation, a checkpoint's values and diff, resume of a failed run and fork from
a checkpoint with edited state. The browser drives it in tests/web/test_page_inspector.py."""

from __future__ import annotations

from starlette.testclient import TestClient

from tests.support.chains import orders_chain
from tests.web.conftest import TOKEN, bearer, csrf_of, login
from tether import Agent, Chain
from tether.registry import Registry
from tether.testing import ScriptedLLM
from tether.web import create_app

FLAKY = {"down": True}


def _reserve(state):
    if FLAKY["down"]:
        raise ConnectionError("the stock service is down")
    return {"reserved": state["sku"]}


def stock_chain(store) -> Chain:
    chain = Chain("stock", store)
    chain.add_node("check", lambda s: {"checked": True})
    chain.add_node("reserve", _reserve)
    return chain


def lookup(order_id: str) -> dict:
    """Look an order up.

    Args:
        order_id: the order.
    """
    return {"order_id": order_id, "status": "shipped"}


def helper_agent(store) -> Agent:
    llm = ScriptedLLM([[{"name": "lookup", "arguments": {"order_id": "C-3"}}], "C-3 has shipped."])
    return Agent("helper", llm=llm, tools=[lookup], checkpointer=store)


def _client(store, *runners) -> TestClient:
    app = create_app(store, registry=Registry(*runners), token=TOKEN)
    return TestClient(app, base_url="http://127.0.0.1")


def test_an_agent_runs_page_shows_its_conversation_with_tool_calls_and_results(store):
    agent = helper_agent(store)
    eid = agent.run("Where is C-3?").execution_id
    with _client(store, agent) as client:
        api = client.get(f"/api/runs/{eid}", headers=bearer()).json()
        roles = [(m["role"], m["tool_name"]) for m in api["conversation"]["messages"]]
        assert roles == [
            ("user", None),
            ("assistant", None),
            ("tool", "lookup"),
            ("assistant", None),
        ]
        assert api["conversation"]["messages"][1]["tool_calls"][0]["arguments"] == {
            "order_id": "C-3"
        }
        assert api["result"] == {
            "status": "completed",
            "output": "C-3 has shipped.",
            "checkpoint_id": api["checkpoints"][-1]["checkpoint_id"],
        }
        assert login(client).status_code == 303
        page = client.get(f"/runs/{eid}").text
    assert 'class="msg msg-tool"' in page and "result of lookup" in page
    assert '<code class="tool-name">lookup</code>' in page and "C-3 has shipped." in page


def test_a_checkpoint_shows_its_values_and_what_changed_against_the_row_before(store):
    eid = orders_chain(store).run({"order_id": "B-2", "amount": 50}).execution_id
    charge = store.list(eid)[1]
    with _client(store, orders_chain(store)) as client:
        shown = client.get(f"/api/runs/{eid}", headers=bearer()).json()
        assert shown["inspected"] is None
        picked = client.get(
            f"/api/runs/{eid}?checkpoint={charge.checkpoint_id}", headers=bearer()
        ).json()["inspected"]
        assert picked["node_id"] == "charge" and picked["seq"] == 2
        assert {c["key"]: c["change"] for c in picked["changes"]} == {
            "receipt": "added",
            "log": "changed",
        }
        assert login(client).status_code == 303
        page = client.get(f"/runs/{eid}?checkpoint={charge.checkpoint_id}").text
        missing = client.get(f"/runs/{eid}?checkpoint=nope")
    assert 'id="inspect"' in page and "Checkpoint 2: charge" in page
    # the receipt was added (with its value) and the log changed (before and after)
    assert '<tr class="change-added"><td>receipt</td>' in page
    assert "&#34;charged&#34;: 50" in page
    assert '<tr class="change-changed"><td>log</td>' in page
    assert missing.status_code == 404 and "has no checkpoint" in missing.text


def test_resume_button_reruns_a_failed_run_and_fork_branches_with_edited_state(store):
    FLAKY["down"] = True
    chain = stock_chain(store)
    eid = chain.run({"sku": "X-9"}).execution_id
    with _client(store, chain) as client:
        assert login(client).status_code == 303
        page = client.get(f"/runs/{eid}").text
        assert 'class="resume"' in page and "Failed at" in page
        FLAKY["down"] = False
        resumed = client.post(
            f"/runs/{eid}/resume", data={"csrf_token": csrf_of(page)}, follow_redirects=False
        )
        assert resumed.status_code == 303 and "notice=run_resumed" in resumed.headers["location"]
        assert store.get_run(eid).status == "completed"
        again = client.post(f"/runs/{eid}/resume", data={"csrf_token": csrf_of(page)})
        assert again.status_code == 409 and "already" in again.text

        check = store.list(eid)[0].checkpoint_id
        inspect = client.get(f"/runs/{eid}?checkpoint={check}").text
        assert 'class="fork"' in inspect
        bad = client.post(
            f"/runs/{eid}/fork",
            data={"csrf_token": csrf_of(inspect), "checkpoint_id": check, "state": "[1]"},
        )
        assert bad.status_code == 400 and "JSON object" in bad.text
        forked = client.post(
            f"/runs/{eid}/fork",
            data={
                "csrf_token": csrf_of(inspect),
                "checkpoint_id": check,
                "state": '{"sku": "Y-1"}',
            },
            follow_redirects=False,
        )
        assert forked.status_code == 303
        branch = forked.headers["location"].split("/runs/", 1)[1].split("?", 1)[0]
        assert branch != eid
        run = store.get_run(branch)
        assert run.parent_execution_id == eid and run.status == "completed"
        assert store.get_last(branch).state_snapshot["reserved"] == "Y-1"
        no_csrf = client.post(f"/runs/{eid}/fork", data={"checkpoint_id": check})
        assert no_csrf.status_code == 403


def test_a_live_run_refreshes_itself_and_a_finished_one_does_not(store):
    from tether.store.base import RunRecord

    store.create_run(RunRecord("live-1", "stock", "chain", status="running"))
    done = stock_chain(store)
    FLAKY["down"] = False
    finished = done.run({"sku": "Z"}).execution_id
    with _client(store, done) as client:
        assert login(client).status_code == 303
        live = client.get("/runs/live-1")
        assert '<meta http-equiv="refresh" content="3">' in live.text
        assert "script-src" not in live.headers["content-security-policy"]
        assert "http-equiv" not in client.get(f"/runs/{finished}").text
