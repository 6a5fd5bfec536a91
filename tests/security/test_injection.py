"""Every SQL statement is parameterized: injection strings fed through every public entry
point — run, resume and fork ids, runner names, node ids, agent names, state keys, interrupt
reasons, idempotency keys, store lookups and CLI arguments — are stored and looked up as plain
text. On both backends, a bystander's rows are byte-for-byte unchanged afterwards, every table
is still there, and the row counts are exactly what the calls themselves wrote."""

from __future__ import annotations

from typing import Any

import pytest

from tests.hostile.conftest import TABLES, counts, raw_sql
from tests.security.runners import INJECTIONS, injection_agent, injection_chain
from tether import Resume
from tether.cli import main
from tether.errors import RunNotFoundError


def snapshot(store: Any) -> dict[str, list[str]]:
    """Every row of every table (the bystander's data), each as the repr of its raw values."""
    sql = raw_sql(store)
    return {t: sorted(map(repr, sql(f"SELECT * FROM {{t}}{t}"))) for t in TABLES}


@pytest.fixture
def bystanders(store: Any) -> dict[str, Any]:
    """A completed and a paused run that the injections must not touch."""
    chain = injection_chain(store)
    done = chain.run({}, execution_id="bystander-done").execution_id
    chain.resume(done, Resume(True))
    chain.run({}, execution_id="bystander-paused")
    return {"rows": snapshot(store), "counts": counts(store)}


def test_injection_strings_through_runner_verbs_are_plain_text(
    store: Any, bystanders: dict[str, Any]
) -> None:
    for i, text in enumerate(INJECTIONS):
        chain = injection_chain(store, text)
        eid = f"{text} run{i}"
        paused = chain.run({text: text}, execution_id=eid)
        assert store.get_pending_interrupt(eid).reason == f"reason {text}"
        done = chain.resume(eid, Resume(True, data=text, metadata={text: text}))
        assert done.output[f"approved {text}"] is True and done.output["effect"] == text
        assert store.get_idempotent(eid, f"key {text}") == (True, text)
        branch = chain.fork(
            eid,
            store.list(eid)[0].checkpoint_id,
            new_execution_id=f"{text} fork{i}",
            state_updates={text: "what-if"},
        )
        assert branch.status == "paused"
        agent = injection_agent(store, text)
        assert agent.run(text, execution_id=f"{text} agent{i}").output == f"answer {text}"
        with pytest.raises(RunNotFoundError):
            chain.resume(f"{text} missing")
        # lookups by hostile values find exactly what was written, nothing else
        assert store.get_run(f"{text} missing") is None
        found = {r.execution_id for r in store.list_runs(runner_name=f"inj {text}")}
        assert found == {eid, f"{text} fork{i}"}
        assert store.list_idempotent(f"{text} missing") == {}
        assert paused.status == "paused"

    after = snapshot(store)
    for table, rows in bystanders["rows"].items():
        assert set(rows) <= set(after[table]), f"{table}: a bystander row changed"
    n = len(INJECTIONS)
    grown = {t: counts(store)[t] - bystanders["counts"][t] for t in TABLES}
    # per string: a run, a fork and an agent run; rows: 4 + 2 (fork origin, pause) + 2 (agent)
    assert grown["runs"] == 3 * n
    assert grown["pending_interrupts"] == n  # each fork pauses again; each run was answered
    assert grown["idempotency_cache"] == n
    assert grown["tether_schema"] == 0
    assert grown["checkpoints"] == n * (4 + 2 + 2)


def test_injection_strings_through_cli_arguments_change_nothing(
    store: Any, db_url: str, bystanders: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_DATABASE_URL", db_url)
    app = ["--app", "tests.security.cli_app:app"]
    for text in INJECTIONS:
        for args in (
            ["runs", "show", text],
            ["runs", "list", "--name", text],
            ["pending", "list"],
            ["approve", text, "--note", text, "--data", '{"x": 1}', *app],
            ["reject", text, "--note", text, *app],
            ["resume", text, *app],
            ["fork", text, "--checkpoint", text, "--state", "{}", *app],
        ):
            code = main([*args, "--db", db_url])
            assert code in (0, 3), (args, code)  # ok, or not found: never a crash
        assert snapshot(store) == bystanders["rows"], text
    # a hostile note and data on a real answer are stored as given
    note = INJECTIONS[1]
    code = main(
        [
            "approve",
            "bystander-paused",
            "--note",
            note,
            "--data",
            '{"q": "\'; DROP TABLE runs; --"}',
            *app,
            "--db",
            db_url,
        ]
    )
    assert code == 0
    assert store.get_run("bystander-paused").status == "completed"
    assert all(counts(store)[t] >= 1 for t in ("runs", "checkpoints", "tether_schema"))
