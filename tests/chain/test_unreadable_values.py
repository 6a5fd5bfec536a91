"""A value that could be written but never read back (an instance of a class defined inside a
function) is refused with ``SerializationError`` naming its path before it is stored, in step
state, interrupt context and ``@idempotent`` results; the run ends ``failed`` (never stuck
``running``), every later resume and fork reads the run, and an ``@idempotent`` body that ran is
not run again. Fresh processes (``tests.support.answers_app``), both backends."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import answers_app
from tests.support.answers_app import effects
from tests.support.proc import run_module
from tests.support.results import question_of

APP = "tests.support.answers_app"


@pytest.fixture
def env(db_url: str, tmp_path: Any) -> dict[str, str]:
    return {"TETHER_DATABASE_URL": db_url, "TETHER_TEST_STEPS": str(tmp_path / "steps.txt")}


def _child(env: dict[str, str], *args: str, **extra: str) -> dict[str, Any]:
    _, out, stderr = run_module(APP, ["receipts", *args], env={**env, **extra})
    assert out is not None, stderr
    return out


def _readable(store: Any, eid: str) -> list[str]:
    """Every row of the run decodes (no ``CorruptRecordError``); returns their node ids."""
    return [cp.node_id for cp in store.list(eid)]


@pytest.mark.parametrize(
    ("place", "path", "node"),
    [("state", 'state["stamp"]', "stamp"), ("context", "interrupt context", "review")],
)
def test_an_unreadable_value_fails_the_step_clearly_and_the_fixed_code_resumes(
    store: Any, env: dict[str, str], place: str, path: str, node: str
) -> None:
    out = _child(env, "run", "u1", TETHER_TEST_LOCAL=place)
    assert out["status"] == "failed", out
    assert out["error_type"] == "SerializationError"
    assert path in out["error"] and "defined inside a function" in out["error"]
    run = store.get_run("u1")
    assert run.status == "failed" and "SerializationError" in run.error
    assert _readable(store, "u1")[-1] == "run_end"
    assert store.get_last("u1").node_output["node_id"] == node
    assert store.get_pending_interrupt("u1") is None

    again = _child(env, "resume", "u1", TETHER_TEST_LOCAL=place)  # same code: same clear error
    assert again["error_type"] == "SerializationError" and store.get_run("u1").status == "failed"

    fixed = _child(env, "resume", "u1")
    assert fixed["status"] == "paused" and fixed["pending"]["reason"] == "ship", fixed
    stamp = store.get_pending_interrupt("u1").context["stamp"]
    assert type(stamp) is answers_app.Stamp and stamp.order_id == "A-1"
    done = _child(env, "resume", "u1", "approve")
    assert done["status"] == "completed", done
    assert [n for n in _readable(store, "u1") if n != "run_end"][-1] == "pay"


def test_an_unreadable_idempotent_result_fails_clearly_and_the_effect_is_not_repeated(
    store: Any, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    local = {"TETHER_TEST_LOCAL": "result"}
    assert _child(env, "run", "u2", **local)["status"] == "paused"
    out = _child(env, "resume", "u2", "approve", **local)
    assert out["status"] == "failed" and out["error_type"] == "SerializationError", out
    assert "receipt" in out["error"] and "defined inside a function" in out["error"]
    assert "does not run again" in out["error"]
    assert store.get_run("u2").status == "failed"
    assert effects(env["TETHER_TEST_STEPS"]) == ["receipt A-1"]

    # Resumes, with the same code or a fixed return type, refuse to repeat the effect.
    for extra in (local, {}):
        again = _child(env, "resume", "u2", **extra)
        assert again["error_type"] == "SerializationError", again
        assert "does not run again" in again["error"]
        assert store.get_run("u2").status == "failed"
    assert effects(env["TETHER_TEST_STEPS"]) == ["receipt A-1"]
    _readable(store, "u2")
    assert list(store.list_idempotent("u2")) == ["receipt:A-1:900"]

    # A fork from the question before the payment reads the run and asks it again.
    monkeypatch.setenv("TETHER_TEST_STEPS", env["TETHER_TEST_STEPS"])
    review = [cp for cp in store.list("u2") if cp.status == "interrupted"][-1]
    branch = answers_app.receipts(store).fork("u2", review.checkpoint_id)
    assert question_of(branch)["reason"] == "ship"
    # Choosing a new key runs the effect again on purpose, and the run completes.
    done = _child(env, "resume", "u2", TETHER_TEST_RECEIPT_KEY="receipt:A-1:900:retry")
    assert done["status"] == "completed", done
    receipt = store.get_last("u2", before_seq=store.get_last("u2").seq).state_snapshot["receipt"]
    assert type(receipt) is answers_app.Receipt and receipt.amount == 900
    assert effects(env["TETHER_TEST_STEPS"]) == ["receipt A-1", "receipt A-1"]
