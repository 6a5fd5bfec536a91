"""Approval deadlines: ``interrupt(..., timeout_seconds=, on_timeout=)`` applied by a worker
when nobody answers, with no other process alive; the inbox shows the time left; the
``on_pending`` hook (callback and webhook) hears of each new question (docs/design.md §12,
"Approval deadlines"). Both backends."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from typing import Any

import pytest

import tether
from tests.control.test_cancel import APP
from tests.support.proc import ROOT, child_env
from tests.support.results import question_of
from tests.support.waiting import wait_for
from tests.workers.procs import spawn_worker, stop_all
from tether import Chain, Resume, interrupt


def _pause_in_a_process_that_exits(url: str, runner: str, eid: str, wait: float) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from tests.control.app import {runner} as r; "
            f"print(r.run({{'wait': {wait}}}, execution_id={eid!r}).status)",
        ],
        cwd=ROOT,
        env=child_env(TETHER_DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "paused", done.stderr


@pytest.mark.parametrize(
    ("runner", "status"),
    [
        ("deadline_default", "completed"),
        ("deadline_fail", "failed"),
        ("deadline_cancel", "cancelled"),
    ],
)
def test_a_deadline_passing_with_only_a_worker_alive_applies_on_timeout(
    store_and_url, tmp_path, runner, status
):
    store, url = store_and_url
    store.setup()
    _pause_in_a_process_that_exits(url, runner, "d", 2.0)
    listed = subprocess.run(
        [sys.executable, "-m", "tether.cli", "pending", "list", "--json", "--db", url],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    [shown] = json.loads(listed.stdout)
    assert shown["due_at"] is not None and 0 <= shown["time_left_seconds"] <= 2.0
    worker = spawn_worker(url, tmp_path, "w", lease_seconds=3, app=APP)
    try:
        wait_for(lambda: store.get_run("d").status == status, f"the run to end {status}", 30)
    finally:
        stop_all([worker])
    assert store.get_pending_interrupt("d") is None
    [entry] = store.list_audit("d")
    assert (entry.actor, entry.via) == ("deadline", "worker")
    assert entry.note == "no answer to 'approve' within 2 s"
    if status == "completed":
        assert entry.action == "rejected" and entry.data == {"auto": True}
        final = store.list("d")[-1].state_snapshot
        assert final["approved"] is False and final["after"] is True
    else:
        assert entry.action == ("cancelled" if status == "cancelled" else "failed_by_deadline")
        end = store.list("d")[-1]
        assert (end.step_type, end.status) == ("run_end", status)
        with pytest.raises(tether.AlreadyResumed):
            Chain(runner, store).add_node("ask", lambda s: {}).resume("d", Resume(approved=True))


def test_an_answer_before_the_deadline_wins_and_the_deadline_then_does_nothing(
    store_and_url, tmp_path
):
    store, url = store_and_url
    store.setup()
    _pause_in_a_process_that_exits(url, "deadline_fail", "early", 1.0)
    approved = subprocess.run(
        [sys.executable, "-m", "tether.cli", "approve", "early", "--db", url, "--by", "ann"],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert approved.returncode == 0, approved.stderr
    worker = spawn_worker(url, tmp_path, "w", lease_seconds=3, app=APP)
    try:
        wait_for(lambda: store.get_run("early").status == "completed", "the answered run", 30)
    finally:
        stop_all([worker])
    assert [(e.action, e.actor) for e in store.list_audit("early")] == [("approved", "ann")]


def test_interrupt_refuses_a_bad_deadline(store):
    def ask(state: dict[str, Any]) -> dict[str, Any]:
        seconds = float(state["t"]) if state["t"] == "inf" else state["t"]
        interrupt("approve", {}, timeout_seconds=seconds, on_timeout=state.get("then"))
        return {}

    chain = Chain("bad_deadline", store)
    chain.add_node("ask", ask)
    for state in ({"t": 0}, {"t": "soon"}, {"t": 5, "then": "ignore"}):
        failed = chain.run(state)
        assert failed.status == "failed" and isinstance(failed.error, tether.ConfigurationError)
    # Past any date (1e300 s) the pause used to commit a due_at no reader could decode, then
    # raise OverflowError out of run(), leaving a run nobody could show.
    for seconds in (1e300, "inf", 36500 * 86400 + 1):
        failed = chain.run({"t": seconds})
        assert failed.status == "failed", failed
        assert isinstance(failed.error, tether.ConfigurationError) and "36500" in str(failed.error)
        assert store.get_run(failed.execution_id).status == "failed"
        assert store.get_pending_interrupt(failed.execution_id) is None
    assert chain.run({"t": 36500 * 86400}).status == "paused"


class _Hook(http.server.BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        _Hook.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_on_pending_tells_a_callback_and_a_webhook_of_each_new_question(store):
    _Hook.received.clear()
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    heard: list[Any] = []
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    tether.on_pending(heard.append, webhook_url=url)
    try:
        chain = Chain("notified", store)
        chain.add_node(
            "ask",
            lambda s: {"ok": interrupt("approve", {"n": 1}, timeout_seconds=60).approved},
        )
        paused = chain.run({})
        wait_for(lambda: _Hook.received, "the webhook", 10)
    finally:
        tether.on_pending(None)
        server.shutdown()
        server.server_close()
    [pending] = heard
    assert pending.execution_id == paused.execution_id and pending.due_at is not None
    [body] = _Hook.received
    assert body["event"] == "interrupt.pending" and body["context"] == {"n": 1}
    assert body["checkpoint_id"] == question_of(paused)["checkpoint_id"]
    assert body["due_at"] is not None
    with pytest.raises(tether.ConfigurationError):
        tether.on_pending(webhook_url="file:///etc/passwd")
