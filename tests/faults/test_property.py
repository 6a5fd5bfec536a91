"""Property: for any chain graph (branches, bounded cycles, nodes that pause for a human), any
crash points and any answers, resuming reaches the same final state as the crash-free run
given the same answers; every ``@idempotent`` effect fires once (at least once, at most once
per crash, in the ``idempotent.after_effect`` window); no committed node runs again.

Most examples simulate the crash in-process: the fault point raises :class:`SimulatedCrash`
(a ``BaseException`` nothing in tether catches), and the next "process" is a new store object
on the same file. A claim a simulated crash leaves behind belongs to this (live) process, so
the next process releases it, standing in for the lease running out. A few examples crash a
real child process with SIGKILL instead (via the fork server of the crash matrix).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.faults.graphs import GRAPH_ENV, build_chain, graph_specs
from tests.faults.harness import Crash, drive
from tests.faults.scenarios import read_lines
from tether import Resume, _faults
from tether.store.sqlite import SQLiteCheckpointer

IN_PROCESS_POINTS = (
    "chain.before_commit",
    "chain.after_commit",
    "chain.after_claim",
    "idempotent.after_effect",
    "idempotent.after_cache",
    "run.before_end",
)
EXAMPLES, FULL_EXAMPLES = 100, 1000
SIGKILL_EXAMPLES, FULL_SIGKILL_EXAMPLES = 10, 100
QUIET = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]

later_crashes = st.lists(
    st.tuples(st.sampled_from(IN_PROCESS_POINTS), st.integers(1, 3)), min_size=0, max_size=2
)
answer_lists = st.lists(st.booleans(), min_size=1, max_size=4)
COUNT_ALL = ",".join(f"{p}@{10**9}" for p in IN_PROCESS_POINTS)


def run_in_process(
    spec: dict[str, Any],
    db: Path,
    answers: list[bool],
    first: tuple[int, str, int] | None = None,
    later: list[tuple[str, int]] | None = None,
) -> tuple[dict[str, Any], int, list[dict[str, int]]]:
    """Run the graph to its end. ``first = (process, point, n)`` crashes that process (0: the
    one that starts the run) at the nth hit of the point; each process after a crash arms the
    next of ``later``. Returns the final state, the number of crashes and, for a run without
    crashes, the fault point hits of each process."""
    eid = uuid.uuid4().hex
    later = list(later or [])
    crashes, asked, processes = 0, 0, 0
    hits: list[dict[str, int]] = []
    store = None
    try:
        while True:
            processes += 1
            assert processes < 200, "the run never ended"
            if store is not None:
                store.close()
            store = SQLiteCheckpointer(db)
            chain = build_chain(spec, store)
            if first is None:
                _faults.rearm(COUNT_ALL, raise_instead=True)
            elif crashes == 0:
                index, point, n = first
                _faults.rearm(f"{point}@{n}" if index == processes - 1 else "", raise_instead=True)
            else:
                point, n = later.pop(0) if later else ("", 0)
                _faults.rearm(f"{point}@{n}" if point else "", raise_instead=True)
            try:
                if processes == 1:
                    result = chain.run({"x": 1}, execution_id=eid)
                else:
                    pending = store.get_pending_interrupt(eid)
                    value = None
                    if pending is not None and pending.claimed_by:  # the "dead" claimer's lease
                        store.release_claim(eid, owner=pending.claimed_by)
                    elif pending is not None and pending.resume_value is None:
                        value = Resume(approved=answers[asked % len(answers)])
                        asked += 1
                    result = chain.resume(eid, value)
            except _faults.SimulatedCrash:
                crashes += 1
                continue
            finally:
                hits.append(dict(_faults._hits))
            if result.status == "completed":
                return dict(result.output), crashes, hits
            assert result.status == "paused", result
    finally:
        _faults.rearm("")
        if store is not None:
            store.close()


def effects(files: dict[str, str]) -> tuple[Counter[str], Counter[str]]:
    ledger = Counter(line.split(" ", 1)[1] for line in read_lines(files["TETHER_TEST_LEDGER"]))
    return Counter(read_lines(files["TETHER_TEST_STEPS"])), ledger


def _files(tmp: Path, name: str) -> dict[str, str]:
    return {
        "TETHER_TEST_STEPS": str(tmp / f"{name}.steps"),
        "TETHER_TEST_LEDGER": str(tmp / f"{name}.ledger"),
    }


in_process_examples = given(
    spec=graph_specs(), answers=answer_lists, later=later_crashes, data=st.data()
)


def check_in_process(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    spec: dict[str, Any],
    answers: list[bool],
    later: list[tuple[str, int]],
    data: st.DataObject,
) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    clean = _files(tmp, "clean")
    monkeypatch.setenv("TETHER_TEST_STEPS", clean["TETHER_TEST_STEPS"])
    monkeypatch.setenv("TETHER_TEST_LEDGER", clean["TETHER_TEST_LEDGER"])
    expected, _, hits = run_in_process(spec, tmp / "t.db", answers)
    # the first crash lands on a point the crash-free run really reaches
    spots = [(i, p, n) for i, h in enumerate(hits) for p, c in h.items() for n in range(1, c + 1)]
    first = data.draw(st.sampled_from(spots))
    crashed = _files(tmp, "crashed")
    monkeypatch.setenv("TETHER_TEST_STEPS", crashed["TETHER_TEST_STEPS"])
    monkeypatch.setenv("TETHER_TEST_LEDGER", crashed["TETHER_TEST_LEDGER"])
    got, crashes, _ = run_in_process(spec, tmp / "t.db", answers, first, later)
    event(f"crashes: {crashes}")

    assert crashes >= 1
    assert got == expected
    base_steps, base_ledger = effects(clean)
    steps, ledger = effects(crashed)
    assert not base_steps - steps
    assert sum((steps - base_steps).values()) <= crashes  # only the step in flight re-runs
    assert set(ledger) == set(base_ledger)
    plan = [first[1:], *later]
    after_effect = sum(1 for p, _ in plan if p == "idempotent.after_effect")
    for key, count in ledger.items():
        assert 1 <= count <= 1 + min(after_effect, crashes), key


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=QUIET)
@in_process_examples
def test_resume_after_any_crashes_reaches_the_crash_free_final_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, **kw: Any
) -> None:
    check_in_process(tmp_path_factory, monkeypatch, **kw)


@pytest.mark.faults
@pytest.mark.timeout(900)
@settings(max_examples=FULL_EXAMPLES, deadline=None, suppress_health_check=QUIET)
@in_process_examples
def test_resume_after_any_crashes_reaches_the_crash_free_final_state_full(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, **kw: Any
) -> None:
    check_in_process(tmp_path_factory, monkeypatch, **kw)


@pytest.fixture
def sigkill_env(fork_server, policy_stub, tmp_path):
    db = tmp_path / "t.db"
    store = SQLiteCheckpointer(db)
    yield fork_server, policy_stub, store, f"sqlite:///{db}", tmp_path
    store.close()


sigkill_examples = given(spec=graph_specs(max_nodes=5), data=st.data())


def check_sigkill(sigkill_env: Any, spec: dict[str, Any], data: st.DataObject) -> None:
    server, stub, store, url, tmp = sigkill_env
    env = {GRAPH_ENV: json.dumps(spec)}
    base = drive(
        server,
        stub,
        store,
        url,
        "random_chain",
        tmp,
        extra_env=env,
        max_processes=100,
        count_faults=True,
    )
    spots = [
        (role, p, n)
        for role, h in enumerate(base.hits_by_role)
        for p, c in h.items()
        for n in range(1, c + 1)
    ]
    role, point, n = data.draw(st.sampled_from(spots))
    got = drive(
        server,
        stub,
        store,
        url,
        "random_chain",
        tmp,
        extra_env=env,
        max_processes=100,
        crash=Crash(point, n, role),
    )
    assert got.crashes == 1
    assert (
        store.get_last(got.execution_id).state_snapshot
        == store.get_last(base.execution_id).state_snapshot
    )
    assert not base.steps - got.steps
    assert sum((got.steps - base.steps).values()) <= got.crashes
    assert set(got.ledger) == set(base.ledger)
    assert all(c == 1 for c in got.ledger.values()) or point == "idempotent.after_effect"


@settings(max_examples=SIGKILL_EXAMPLES, deadline=None, suppress_health_check=QUIET)
@sigkill_examples
def test_sigkill_at_a_random_point_of_a_random_graph_then_resume_matches(
    sigkill_env: Any, **kw: Any
) -> None:
    check_sigkill(sigkill_env, **kw)


@pytest.mark.faults
@pytest.mark.timeout(900)
@settings(max_examples=FULL_SIGKILL_EXAMPLES, deadline=None, suppress_health_check=QUIET)
@sigkill_examples
def test_sigkill_at_a_random_point_of_a_random_graph_then_resume_matches_full(
    sigkill_env: Any, **kw: Any
) -> None:
    check_sigkill(sigkill_env, **kw)
