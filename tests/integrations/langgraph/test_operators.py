"""tether's operator tools on LangGraph threads, in real processes (SQLite and Postgres): the
interrupt listed by ``tether pending list`` and answered by ``tether approve`` (resuming the
graph with ``Command(resume=...)``), two approvers at once (one wins), ``tether worker``
continuing a thread whose process was SIGKILLed, ``tether prune`` leaving paused threads, and
the approvals page in Chromium."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import tether
from tests.integrations.langgraph.app import support
from tests.integrations.langgraph.conftest import call, lg_env, spawn_child
from tests.integrations.langgraph.graphs import ledger, saved
from tests.llm.stub_server import StubServer
from tests.support.proc import ROOT
from tests.support.results import question_of
from tests.support.waiting import wait_for
from tests.workers.procs import stop_all
from tether.integrations.langgraph import TetherSaver
from tether.integrations.langgraph.runner import INTERRUPT_REASON

APP = "tests.integrations.langgraph.app:app"
REFUND = {"tool": "refund", "order_id": "A-1", "amount": "40.00"}


def tether_cli(
    env: dict[str, str], *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", *args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def paused_refund(store, stub: StubServer, monkeypatch) -> str:
    monkeypatch.setenv("STUB_URL", stub.url)
    stub.script([call("refund", order_id="A-1", amount="40.00")])
    paused = support(store).run({"messages": [("user", "Refund A-1")]}, thread_id="A-1")
    assert question_of(paused)["context"] == REFUND
    return paused.execution_id


def status_of(store, eid: str) -> str | None:
    run = store.get_run(eid)
    return None if run is None else run.status


def test_pending_list_shows_the_interrupt_value_and_approve_resumes_the_graph_once(
    store, db_url: str, stub: StubServer, ledger_path: Path, monkeypatch
):
    eid = paused_refund(store, stub, monkeypatch)
    env = lg_env(db_url, stub, ledger_path)

    listed = tether_cli(env, "pending", "list", "--db", db_url, "--json")
    assert listed.returncode == 0, listed.stderr
    [item] = json.loads(listed.stdout)
    assert (item["execution_id"], item["reason"], item["context"]) == (
        "A-1",
        INTERRUPT_REASON,
        REFUND,
    )

    stub.script([{"text": "Refunded."}])
    done = tether_cli(env, "approve", eid, "--app", APP, "--db", db_url, "--json")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    assert ledger(ledger_path) == ["refund-paid:A-1:40.00"]
    again = tether_cli(env, "approve", eid, "--app", APP, "--db", db_url)
    assert again.returncode != 0 and "already" in (again.stderr + again.stdout).lower()
    assert ledger(ledger_path) == ["refund-paid:A-1:40.00"]
    # The graph's own history has the answer as LangGraph's resume value.
    final = saved(TetherSaver(store), {"configurable": {"thread_id": eid}})
    assert final.checkpoint["channel_values"]["messages"][-1].content == "Refunded."


def test_two_approvers_at_once_resume_the_thread_once(
    store, db_url: str, stub: StubServer, ledger_path: Path, monkeypatch
):
    eid = paused_refund(store, stub, monkeypatch)
    # The model answers slowly, so the winner is still driving the graph when the other tries.
    stub.script([{"text": "Refunded.", "delay_seconds": 1.5}])
    env = lg_env(db_url, stub, ledger_path)
    argv = [sys.executable, "-m", "tether.cli", "approve", eid, "--app", APP, "--db", db_url]
    procs = [
        subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for _ in range(2)
    ]  # fmt: skip
    outs = [(p.wait(timeout=60), *p.communicate()) for p in procs]

    assert sorted(rc == 0 for rc, _, _ in outs) == [False, True], outs
    loser = next(out + err for rc, out, err in outs if rc != 0)
    assert "already" in loser.lower() or "lease" in loser.lower(), loser
    assert ledger(ledger_path) == ["refund-paid:A-1:40.00"]
    assert len(stub.requests) == 2 and status_of(store, eid) == "completed"


def test_a_worker_continues_a_killed_thread_and_an_answer_stored_without_the_app(
    store, db_url: str, stub: StubServer, ledger_path: Path, tmp_path: Path
):
    store.setup()
    hold = tmp_path / "hold"
    hold.touch()
    stub.script([call("lookup", order_id="A-1"), call("refund", order_id="A-1", amount="40.00")])
    env = lg_env(db_url, stub, ledger_path, TETHER_TEST_HOLD=str(hold))
    child = spawn_child(env, "runner", "A-1", "Refund A-1", log=tmp_path / "child.log")
    wait_for(lambda: "lookup-held:A-1" in ledger(ledger_path), "the lookup tool to hold")
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL
    hold.unlink()
    assert status_of(store, "A-1") == "running"

    worker_env = lg_env(db_url, stub, ledger_path)
    with open(tmp_path / "worker.log", "ab") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "tether.cli", "worker", "--app", APP, "--db", db_url,
             "--lease-seconds", "1", "--poll-interval", "0.05"],
            env=worker_env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
    try:
        wait_for(lambda: status_of(store, "A-1") == "paused", "the takeover to pause", 60)
        assert len(stub.requests) == 2
        stub.script([{"text": "Refunded."}])
        stored = tether_cli(worker_env, "approve", "A-1", "--db", db_url, "--json")
        assert stored.returncode == 0, stored.stderr
        assert json.loads(stored.stdout)["action"] == "answer_stored"
        wait_for(lambda: status_of(store, "A-1") == "completed", "the approved thread", 60)

        # A queued thread (plain JSON input) is started by the worker and pauses.
        stub.script([call("refund", order_id="B-2", amount="5.00")])
        queued = tether.enqueue(store, "support", {"messages": [["user", "Refund B-2"]]})
        wait_for(lambda: status_of(store, queued) == "paused", "the queued thread to pause", 60)
        assert store.get_pending_interrupt(queued).context["order_id"] == "B-2"
    finally:
        stop_all([worker])
    assert ledger(ledger_path).count("lookup-start:A-1") == 2
    assert ledger(ledger_path).count("refund-paid:A-1:40.00") == 1
    assert len(stub.requests) == 4  # three for A-1 (none sent twice), one for B-2
    assert "Traceback" not in (tmp_path / "worker.log").read_text()


def test_prune_deletes_a_finished_thread_and_leaves_a_paused_one(
    store, db_url: str, stub: StubServer, ledger_path: Path, monkeypatch
):
    paused = paused_refund(store, stub, monkeypatch)
    stub.script([{"text": "Nothing to do."}])
    done = support(store).run({"messages": [("user", "Hello")]}, thread_id="B-2")
    assert done.status == "completed"
    saver = TetherSaver(store)

    pruned = tether_cli(
        lg_env(db_url, stub, ledger_path), "prune", "--older-than", "0s", "--db", db_url
    )

    assert pruned.returncode == 0, pruned.stderr + pruned.stdout
    assert store.get_run("B-2") is None
    assert list(saver.list({"configurable": {"thread_id": "B-2"}})) == []
    assert status_of(store, paused) == "paused"
    assert saver.get_tuple({"configurable": {"thread_id": paused}}) is not None


def test_the_approvals_page_shows_the_interrupt_and_approving_completes_the_thread(
    chromium, store, db_url: str, stub: StubServer, ledger_path: Path, tmp_path: Path, monkeypatch
):
    from playwright.sync_api import expect, sync_playwright

    from tests.web.conftest import TOKEN, start_server, stop_server
    from tests.web.test_page import CHROMIUM_ARGS

    eid = paused_refund(store, stub, monkeypatch)
    stub.script([{"text": "Refunded."}])
    server = start_server(
        db_url, tmp_path / "serve.log", "--app", APP, STUB_URL=stub.url, LEDGER=str(ledger_path)
    )
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                page = browser.new_context(base_url=server.url).new_page()
                page.goto("/login")
                page.fill("input[name=token]", TOKEN)
                page.click("button[type=submit]")
                page.wait_for_url(f"{server.url}/pending")
                card = page.locator(f"tr.pending[data-execution-id='{eid}']")
                expect(card).to_contain_text(INTERRUPT_REASON)
                expect(card.locator("pre.context")).to_contain_text('"amount": "40.00"')
                card.locator(f"a[href='/runs/{eid}']").click()
                page.wait_for_url(f"{server.url}/runs/{eid}")
                page.click("#pending button.approve")
                page.wait_for_url(f"{server.url}/runs/{eid}?notice=resumed")
                expect(page.locator("h1 .status")).to_have_text("completed")
            finally:
                browser.close()
    finally:
        stop_server(server)
    assert status_of(store, eid) == "completed"
    assert ledger(ledger_path) == ["refund-paid:A-1:40.00"]


@pytest.fixture(autouse=True)
def _no_stale_app(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TETHER_DATABASE_URL", raising=False)


def test_an_interrupt_answered_on_the_graph_directly_is_not_applied_twice_by_the_runner(
    store, stub: StubServer, ledger_path: Path, monkeypatch
):
    from langgraph.types import Command

    from tether import Resume

    eid = paused_refund(store, stub, monkeypatch)
    runner = support(store)
    stub.script([{"text": "Refunded."}])
    runner.graph.invoke(Command(resume={"approved": True}), {"configurable": {"thread_id": eid}})
    assert ledger(ledger_path) == ["refund-paid:A-1:40.00"]
    assert status_of(store, eid) == "paused"  # tether has not heard of it yet

    done = runner.resume(eid, Resume(approved=True))

    assert done.status == "completed"
    assert done.output["messages"][-1].content == "Refunded."
    assert ledger(ledger_path) == ["refund-paid:A-1:40.00"]  # the graph did not run it again
    assert len(stub.requests) == 2


def test_runs_delete_removes_a_threads_langgraph_rows_and_leaves_other_threads(
    store, db_url: str, stub: StubServer, ledger_path: Path, monkeypatch
):
    paused = paused_refund(store, stub, monkeypatch)
    stub.script([{"text": "Nothing to do."}])
    assert support(store).run({"messages": [("user", "Hello")]}, thread_id="B-2").status == (
        "completed"
    )
    saver = TetherSaver(store)
    assert list(saver.list({"configurable": {"thread_id": paused}}))

    deleted = tether_cli(
        lg_env(db_url, stub, ledger_path), "runs", "delete", paused, "--yes", "--db", db_url
    )

    assert deleted.returncode == 0, deleted.stderr + deleted.stdout
    assert store.get_run(paused) is None
    assert list(saver.list({"configurable": {"thread_id": paused}})) == []
    assert saver.get_tuple({"configurable": {"thread_id": "B-2"}}) is not None
