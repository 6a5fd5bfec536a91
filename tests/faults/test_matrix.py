"""The crash matrix: every runner kind (and a fork of each) x every fault point it reaches x
both backends. Each scenario runs in child processes until a named fault point SIGKILLs one,
is resumed by fresh processes until it completes, and is compared with a crash-free run of the
same input:

- the same final output and the same final state;
- the same sequence of committed rows (no step recorded twice, none missing);
- no node or tool executed more often than in the crash-free run, except the one step that
  was in flight when the process died (before its checkpoint committed), once per crash;
- every ``@idempotent`` charge exactly once per key, except in the documented at-least-once
  window ``idempotent.after_effect``;
- every request the models received valid for its provider (OpenAI, Anthropic).

Default runs take one crash position per (scenario, fault point) on SQLite and one fault point
per scenario on Postgres. The full matrix (marker ``faults``, ``make test-faults``) crashes at
every hit of every point in every process of the run, on both backends, and lets the point fire
again in the next two resumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.faults.harness import Crash, Outcome, drive
from tests.faults.scenarios import KINDS, fork_source_row
from tests.llm.stub_server import ANTHROPIC_PATH
from tests.llm.validators import assert_anthropic_request_valid, assert_openai_request_valid

CHAIN_POINTS = (
    "chain.before_commit",
    "chain.after_commit",
    "chain.after_claim",
    "run.before_end",
)
AGENT_POINTS = (
    "agent.before_llm",
    "agent.after_llm",
    "agent.before_tool",
    "agent.after_tool",
    "agent.after_loop",
    "agent.after_claim",
)
EFFECT_POINTS = ("idempotent.after_effect", "idempotent.after_cache")
# Points where the step in flight had run (some of its effects happened) but its checkpoint
# had not committed: that one step runs again on resume.
RERUN_POINTS = frozenset(
    {"chain.before_commit", "agent.after_tool", "idempotent.after_effect", "idempotent.after_cache"}
)


def points_of(kind: str, fork: bool) -> tuple[str, ...]:
    if kind == "chain":  # the fork branches after the charge: no effect left to crash in
        return CHAIN_POINTS if fork else CHAIN_POINTS + EFFECT_POINTS
    if kind == "chain_with_agent":
        return CHAIN_POINTS + AGENT_POINTS + EFFECT_POINTS
    return AGENT_POINTS + EFFECT_POINTS


SCENARIOS = [(kind, fork) for fork in (False, True) for kind in KINDS]


def _sid(kind: str, fork: bool) -> str:
    return f"fork_of_{kind}" if fork else kind


MATRIX = [
    pytest.param(kind, fork, point, id=f"{_sid(kind, fork)}-{point}")
    for kind, fork in SCENARIOS
    for point in points_of(kind, fork)
]
POSTGRES_SLICE = [
    pytest.param(kind, False, points_of(kind, False)[i], id=f"{kind}-{points_of(kind, False)[i]}")
    for i, kind in enumerate(KINDS)
]


@dataclass
class Baseline:
    outcome: Outcome
    rows: list[tuple[Any, ...]]
    final_state: Any
    fork_of: tuple[str, str] | None


_baselines: dict[tuple[str, str, bool], Baseline] = {}


def _rows(store: Any, eid: str) -> list[tuple[Any, ...]]:
    return [(c.node_id, c.step_type, c.status, c.agent_path) for c in store.list(eid)]


def baseline(ctx: Any, backend: str, kind: str, fork: bool) -> Baseline:
    """The crash-free run of a scenario (with fault hit counts), once per session."""
    key = (backend, kind, fork)
    if key not in _baselines:
        store, url = ctx.matrix_store(backend)
        fork_of = None
        if fork:
            source = drive(ctx.fork_server, ctx.policy_stub, store, url, kind, ctx.tmp)
            row = fork_source_row(kind, store.list(source.execution_id))
            fork_of = (source.execution_id, row.checkpoint_id)
        out = drive(
            ctx.fork_server,
            ctx.policy_stub,
            store,
            url,
            kind,
            ctx.tmp,
            count_faults=True,
            fork_of=fork_of,
        )
        last = store.get_last(out.execution_id)
        _baselines[key] = Baseline(
            out, _rows(store, out.execution_id), last.state_snapshot, fork_of
        )
    return _baselines[key]


def positions(base: Baseline, point: str) -> list[tuple[int, int]]:
    """Every ``(role, n)`` at which ``point`` is reached in the crash-free run."""
    return [
        (role, n)
        for role, hits in enumerate(base.outcome.hits_by_role)
        for n in range(1, hits.get(point, 0) + 1)
    ]


def assert_same_as_baseline(
    ctx: Any, backend: str, base: Baseline, got: Outcome, point: str
) -> None:
    store, _ = ctx.matrix_store(backend)
    where = f"{got.execution_id} ({point}, {got.crashes} crash(es))"
    assert got.crashes >= 1, f"{where}: the fault never fired"
    # same output and final state
    assert got.results[-1]["status"] == "completed"
    assert got.results[-1]["output"] == base.outcome.results[-1]["output"], where
    last = store.get_last(got.execution_id)
    assert last.node_id == "run_end" and last.status == "completed", where
    assert last.state_snapshot == base.final_state, where
    assert store.get_run(got.execution_id).status == "completed"
    # the same committed rows: nothing recorded twice, nothing skipped
    assert _rows(store, got.execution_id) == base.rows, where
    # no completed step executed again; only the step in flight, once per crash
    missing = base.outcome.steps - got.steps
    extra = got.steps - base.outcome.steps
    assert not missing, f"{where}: steps never ran: {missing}"
    if point in RERUN_POINTS:
        assert sum(extra.values()) <= got.crashes, f"{where}: re-executed {extra}"
    else:
        assert not extra, f"{where}: completed steps re-executed: {extra}"
    # every idempotent effect exactly once (at-least-once only in the documented window)
    assert set(got.ledger) == set(base.outcome.ledger), where
    for key, count in got.ledger.items():
        if point == "idempotent.after_effect":
            assert 1 <= count <= 1 + got.crashes, f"{where}: charged {count} times"
        else:
            assert count == 1, f"{where}: charged {count} times"
    # the models: valid histories, asked again at most once per crash
    for path, body in got.requests:
        if path == ANTHROPIC_PATH:
            assert_anthropic_request_valid(body)
        else:
            assert_openai_request_valid(body)
    asked_again = len(got.requests) - len(base.outcome.requests)
    assert 0 <= asked_again <= got.crashes, f"{where}: model asked {asked_again} extra times"
    if point == "agent.after_llm":
        assert asked_again >= 1, f"{where}: the lost answer was not asked for again"


@dataclass
class Ctx:
    fork_server: Any
    policy_stub: Any
    matrix_store: Any
    tmp: Any


@pytest.fixture
def ctx(fork_server, policy_stub, matrix_store, tmp_path) -> Ctx:
    return Ctx(fork_server, policy_stub, matrix_store, tmp_path)


def run_crash(ctx: Ctx, backend: str, kind: str, fork: bool, crash: Crash) -> None:
    base = baseline(ctx, backend, kind, fork)
    store, url = ctx.matrix_store(backend)
    got = drive(
        ctx.fork_server,
        ctx.policy_stub,
        store,
        url,
        kind,
        ctx.tmp,
        crash=crash,
        fork_of=base.fork_of,
    )
    assert_same_as_baseline(ctx, backend, base, got, crash.point)


def _representative(ctx: Ctx, backend: str, kind: str, fork: bool, point: str) -> Crash:
    spots = positions(baseline(ctx, backend, kind, fork), point)
    assert spots, f"{_sid(kind, fork)} never reaches {point}: the matrix table is stale"
    role, n = spots[len(spots) // 2]
    return Crash(point, n, role)


@pytest.mark.parametrize(("kind", "fork", "point"), MATRIX)
def test_crash_then_resume_matches_a_crash_free_run_on_sqlite(
    ctx: Ctx, kind: str, fork: bool, point: str
) -> None:
    run_crash(ctx, "sqlite", kind, fork, _representative(ctx, "sqlite", kind, fork, point))


@pytest.mark.postgres
@pytest.mark.parametrize(("kind", "fork", "point"), POSTGRES_SLICE)
def test_crash_then_resume_matches_a_crash_free_run_on_postgres(
    ctx: Ctx, kind: str, fork: bool, point: str
) -> None:
    run_crash(ctx, "postgres", kind, fork, _representative(ctx, "postgres", kind, fork, point))


@pytest.mark.faults
@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize(("kind", "fork", "point"), MATRIX)
def test_crash_at_every_hit_of_every_point_then_resume_matches_a_crash_free_run(
    ctx: Ctx, backend: str, kind: str, fork: bool, point: str
) -> None:
    spots = positions(baseline(ctx, backend, kind, fork), point)
    assert spots, f"{_sid(kind, fork)} never reaches {point}: the matrix table is stale"
    for role, n in spots:
        run_crash(ctx, backend, kind, fork, Crash(point, n, role, refire=2))


def test_matrix_covers_every_fault_point() -> None:
    from tether._faults import FAULT_POINTS

    covered = {point for kind, fork in SCENARIOS for point in points_of(kind, fork)}
    assert covered == set(FAULT_POINTS)


def test_a_crash_free_run_hits_each_point_the_table_lists_and_no_other(ctx: Ctx) -> None:
    for kind, fork in SCENARIOS:
        base = baseline(ctx, "sqlite", kind, fork)
        reached = {p for hits in base.outcome.hits_by_role for p, n in hits.items() if n}
        assert reached == set(points_of(kind, fork)), _sid(kind, fork)
