"""An answer is bound to the question the person was shown (the pending interrupt's
``checkpoint_id``): stored from anywhere (the store, ``tether approve`` without ``--app``, the
web page's form, the API) or given in code (``Resume(checkpoint_id=...)``), it is refused,
nothing stored, once the run waits on another question.

The run here is ``approvals`` (tests/support/answers_app.py): one step asks ``refund`` and then
``wire``. Once ``refund`` is answered the run pauses on ``wire``; an approval meant for the
refund must never approve the wire transfer.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import tether
from tests.cli.test_cli import tether_cli
from tests.support.answers_app import approvals, effects
from tests.support.results import question_of
from tests.web.conftest import TOKEN, bearer, csrf_of, login
from tether import InterruptChangedError, Resume
from tether.registry import Registry
from tether.web import create_app

STEPS_ENV = "TETHER_TEST_STEPS"


@pytest.fixture
def steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = str(tmp_path / "steps.txt")
    monkeypatch.setenv(STEPS_ENV, path)
    return path


def _moved_on(store: Any, eid: str) -> tuple[str, str]:
    """Pause ``eid`` on ``refund``, answer it, and return the two questions' checkpoint ids
    (the run now waits on ``wire``)."""
    chain = approvals(store)
    assert chain.run({"order_id": "A-1"}, execution_id=eid).status == "paused"
    refund = store.get_pending_interrupt(eid)
    assert refund.reason == "refund"
    again = chain.resume(eid, Resume(approved=True, checkpoint_id=refund.checkpoint_id))
    assert question_of(again)["reason"] == "wire"
    wire = store.get_pending_interrupt(eid)
    assert question_of(again)["checkpoint_id"] == wire.checkpoint_id
    return refund.checkpoint_id, wire.checkpoint_id


def _wire_unanswered(store: Any, eid: str, wire: str) -> None:
    pending = store.get_pending_interrupt(eid)
    assert pending.checkpoint_id == wire and pending.reason == "wire"
    assert pending.resume_value is None and pending.claimed_by is None
    assert store.get_run(eid).status == "paused"


def test_the_store_refuses_an_answer_for_a_question_the_run_moved_past(
    store: Any, steps: str
) -> None:
    refund, wire = _moved_on(store, "b1")
    late = Resume(approved=True).to_dict()
    assert store.answer_interrupt("b1", late, checkpoint_id=refund) is False
    _wire_unanswered(store, "b1", wire)
    assert store.answer_interrupt("b1", late, checkpoint_id=wire) is True
    assert store.get_pending_interrupt("b1").resume_value["approved"] is True


def test_a_resume_in_code_bound_to_a_past_question_is_refused_naming_the_one_pending(
    store: Any, steps: str
) -> None:
    refund, wire = _moved_on(store, "b2")
    chain = approvals(store)
    with pytest.raises(InterruptChangedError) as caught:
        chain.resume("b2", Resume(approved=True, checkpoint_id=refund))
    assert caught.value.checkpoint_id == refund
    assert caught.value.pending_checkpoint_id == wire
    assert "'wire'" in str(caught.value) and wire in str(caught.value)
    _wire_unanswered(store, "b2", wire)
    done = chain.resume("b2", Resume(approved=False, checkpoint_id=wire))
    assert done.status == "completed" and done.output == {
        "order_id": "A-1",
        "refund": True,
        "wire": False,
    }
    assert effects(steps) == ["refund A-1"]


def test_a_fork_whose_answer_names_another_question_is_refused(store: Any, steps: str) -> None:
    refund, wire = _moved_on(store, "b3")
    chain = approvals(store)
    with pytest.raises(tether.ChainResumeError, match=refund):
        chain.fork("b3", wire, resume_value=Resume(approved=True, checkpoint_id=refund))
    assert [r.execution_id for r in store.list_runs()] == ["b3"]


def test_tether_approve_binds_to_the_question_shown_and_refuses_it_once_the_run_moved_on(
    store: Any, db_url: str, steps: str
) -> None:
    chain = approvals(store)
    assert chain.run({"order_id": "A-1"}, execution_id="b4").status == "paused"
    listed = tether_cli(db_url, "pending", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [shown] = json.loads(listed.stdout)
    assert shown["reason"] == "refund"
    # Someone else answers the refund meanwhile; the run moves on to the wire question.
    assert chain.resume("b4", Resume(approved=False)).status == "paused"
    wire = store.get_pending_interrupt("b4").checkpoint_id

    late = tether_cli(db_url, "approve", "b4", "--checkpoint", shown["checkpoint_id"])
    assert late.returncode == 2, (late.stdout, late.stderr)
    assert "InterruptChangedError" in late.stderr
    assert "'wire'" in late.stderr and wire in late.stderr
    _wire_unanswered(store, "b4", wire)

    # Without --checkpoint the command binds to the question pending now and prints it.
    now = tether_cli(db_url, "approve", "b4")
    assert now.returncode == 0, now.stderr
    assert "answering the pending question 'wire'" in now.stdout and wire in now.stdout
    assert store.get_pending_interrupt("b4").resume_value["approved"] is True

    stale = tether_cli(db_url, "reject", "b4", "--checkpoint", "0" * 32)
    assert stale.returncode == 3 and "no checkpoint" in stale.stderr


def test_the_web_form_and_the_api_refuse_an_answer_for_a_question_no_longer_shown(
    store: Any, steps: str
) -> None:
    chain = approvals(store)
    app = create_app(store, registry=Registry(chain), token=TOKEN)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        login(client)
        assert chain.run({"order_id": "A-1"}, execution_id="b5").status == "paused"
        page = client.get("/runs/b5").text
        refund = store.get_pending_interrupt("b5").checkpoint_id
        assert f'name="checkpoint_id" value="{refund}"' in page
        # The refund is answered from elsewhere while the page is open.
        assert chain.resume("b5", Resume(approved=False)).status == "paused"
        wire = store.get_pending_interrupt("b5").checkpoint_id

        posted = client.post(
            "/runs/b5/approve", data={"csrf_token": csrf_of(page), "checkpoint_id": refund}
        )
        assert posted.status_code == 409 and "wire" in posted.text and wire in posted.text
        _wire_unanswered(store, "b5", wire)

        api = client.post("/api/runs/b5/approve", headers=bearer(), json={"checkpoint_id": refund})
        assert api.status_code == 409 and wire in api.json()["error"]
        _wire_unanswered(store, "b5", wire)
        bad = client.post("/api/runs/b5/approve", headers=bearer(), json={"checkpoint_id": 7})
        assert bad.status_code == 400

        ok = client.post("/api/runs/b5/reject", headers=bearer(), json={"checkpoint_id": wire})
        assert ok.status_code == 200 and ok.json()["checkpoint_id"] == wire
        assert ok.json()["status"] == "completed"
    assert effects(steps) == []


def test_a_stored_answer_for_the_form_shown_without_the_runner_is_refused_too(
    store: Any, steps: str
) -> None:
    chain = approvals(store)
    app = create_app(store, registry=Registry(), token=TOKEN)  # answers are only stored
    with TestClient(app, base_url="http://127.0.0.1") as client:
        refund, wire = _moved_on(store, "b6")
        api = client.post("/api/runs/b6/approve", headers=bearer(), json={"checkpoint_id": refund})
        assert api.status_code == 409 and wire in api.json()["error"]
        _wire_unanswered(store, "b6", wire)
        ok = client.post("/api/runs/b6/approve", headers=bearer(), json={"checkpoint_id": wire})
        assert ok.status_code == 200 and ok.json()["action"] == "answer_stored"
    assert chain.resume("b6").output == {"order_id": "A-1", "refund": True, "wire": True}


# --- a race between the run moving on and answers bound to the question it moved past -------


def _late_approver(url: str, eid: str, refund: str, go: Any, results: Any) -> None:
    """Answer ``refund`` (store only) over and over from the moment the run is being resumed
    until it waits on another question, and a while after: every try must be refused once
    the refund question is gone."""
    store = tether.connect(url)
    value = Resume(approved=True, metadata={"answered_by": "late approver"}).to_dict()
    go.wait()
    stored = 0
    seen_other = None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if store.answer_interrupt(eid, value, checkpoint_id=refund):
            stored += 1
        pending = store.get_pending_interrupt(eid)
        if pending is not None and pending.checkpoint_id != refund:
            seen_other = seen_other or time.monotonic()
            if time.monotonic() - seen_other > 0.3:
                break
    store.close()
    results.put(stored)


def test_answers_racing_a_run_that_moves_on_never_land_on_the_next_question(
    store: Any, db_url: str, steps: str
) -> None:
    ctx = mp.get_context("spawn")
    chain = approvals(store)
    for round_ in range(4):
        eid = f"race-{round_}"
        assert chain.run({"order_id": "A-1"}, execution_id=eid).status == "paused"
        refund = store.get_pending_interrupt(eid).checkpoint_id
        go, results = ctx.Event(), ctx.Queue()
        racers = [
            ctx.Process(target=_late_approver, args=(db_url, eid, refund, go, results))
            for _ in range(3)
        ]
        for p in racers:
            p.start()
        time.sleep(1.0)  # the racers' imports; they wait on `go`
        go.set()
        try:
            again = chain.resume(eid, Resume(approved=False, checkpoint_id=refund))
        except tether.AlreadyResumed:  # a racer answered the refund first: fine, it was shown
            again = None
        stored = [results.get(timeout=60) for _ in racers]
        for p in racers:
            p.join(10)
        pending = store.get_pending_interrupt(eid)
        if again is None:
            assert sum(stored) == 1 and pending.checkpoint_id == refund
            continue
        assert sum(stored) == 0 and question_of(again)["reason"] == "wire"
        _wire_unanswered(store, eid, pending.checkpoint_id)
    assert "wire A-1" not in effects(steps)
