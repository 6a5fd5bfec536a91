"""A run paused inside an agent's tool, resumed by code that renamed or removed that tool (or
the agent, swarm member or supervisor worker holding it): the resume is refused before the
answer is claimed, with an error naming what is missing, and the interrupt stays pending and
answerable once the code has it again. Agent, Swarm, Supervisor and an agent chain node; both
backends; in process (``tests/cli/test_changed_code.py`` does it through fresh processes)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import answers_app
from tests.support.answers_app import effects
from tether import ConfigurationError, Resume

KINDS = ["desk", "desk_swarm", "desk_supervisor", "desk_flow"]


@pytest.fixture
def steps(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    path = str(tmp_path / "steps.txt")
    monkeypatch.setenv("TETHER_TEST_STEPS", path)
    return path


def _deploy(kind: str, store: Any, monkeypatch: pytest.MonkeyPatch, **env: str) -> Any:
    """The runner as code deployed with ``env`` builds it."""
    for name in ("TETHER_TEST_TOOL", "TETHER_TEST_BILLING"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return answers_app.RUNNERS[kind](store)


def _paused(kind: str, store: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    result = _deploy(kind, store, monkeypatch).run(answers_app.INPUTS[kind])
    assert result.status == "paused", result.error
    assert result.pending_interrupt["reason"] == "approve_refund"
    return str(result.execution_id)


def _models(runner: Any) -> list[Any]:
    if hasattr(runner, "agents"):
        return [a.llm for a in runner.agents.values()]
    if hasattr(runner, "workers"):
        return [runner.llm, *(w.agent.llm for w in runner.workers.values())]
    if hasattr(runner, "runners"):
        return [node.runner.llm for node in runner.runners.values()]
    return [runner.llm]


def _untouched(store: Any, eid: str, rows: int) -> None:
    pending = store.get_pending_interrupt(eid)
    assert pending is not None and pending.claimed_by is None
    assert len(store.list(eid)) == rows
    assert store.get_run(eid).status == "paused"


RENAMED_TOOL = {"TETHER_TEST_TOOL": "refund_v2"}
RENAMED_AGENT = {"TETHER_TEST_BILLING": "payments"}
CHANGES = [
    *((kind, RENAMED_TOOL, "tool 'refund'") for kind in KINDS),
    ("desk_swarm", RENAMED_AGENT, "agent 'billing'"),
    ("desk_supervisor", RENAMED_AGENT, "worker 'billing'"),
    ("desk_flow", RENAMED_AGENT, "agent 'agent:billing', which this code no longer has"),
]


@pytest.mark.parametrize(
    ("kind", "env", "missing"),
    CHANGES,
    ids=[f"{kind}-{'tool' if env is RENAMED_TOOL else 'agent'}" for kind, env, _ in CHANGES],
)
def test_resume_into_a_renamed_tool_or_agent_is_refused_before_the_claim(
    store: Any,
    monkeypatch: pytest.MonkeyPatch,
    steps: str,
    kind: str,
    env: dict[str, str],
    missing: str,
) -> None:
    eid = _paused(kind, store, monkeypatch)
    rows = len(store.list(eid))
    changed = _deploy(kind, store, monkeypatch, **env)

    with pytest.raises(ConfigurationError, match=missing) as refused:
        changed.resume(eid, Resume(True))
    assert "nothing was claimed" in str(refused.value)
    assert refused.value.execution_id == eid
    _untouched(store, eid, rows)
    assert store.get_pending_interrupt(eid).resume_value is None
    assert all(model.call_count == 0 for model in _models(changed))  # no model was told
    with pytest.raises(ConfigurationError, match=missing):
        changed.fork(eid, resume_value=Resume(True))
    assert len(store.list_runs()) == 1  # no branch run either

    restored = _deploy(kind, store, monkeypatch)
    done = restored.resume(eid, Resume(True))
    assert done.status == "completed", done.error
    assert effects(steps) == ["tool A-1 900"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_answer_stored_from_anywhere_is_kept_when_the_tool_is_gone(
    store: Any, monkeypatch: pytest.MonkeyPatch, steps: str, kind: str
) -> None:
    eid = _paused(kind, store, monkeypatch)
    assert store.answer_interrupt(eid, Resume(True).to_dict())
    rows = len(store.list(eid))
    changed = _deploy(kind, store, monkeypatch, TETHER_TEST_TOOL="refund_v2")
    with pytest.raises(ConfigurationError, match="tool 'refund'"):
        changed.resume(eid)
    _untouched(store, eid, rows)
    assert store.get_pending_interrupt(eid).resume_value["approved"] is True
    assert effects(steps) == []

    done = _deploy(kind, store, monkeypatch).resume(eid)
    assert done.status == "completed", done.error
    assert effects(steps) == ["tool A-1 900"]
