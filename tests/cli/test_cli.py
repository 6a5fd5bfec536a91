"""The ``tether`` command, run through its real entry point in a subprocess, on both backends.

Runs are created in this process with ``tests.support.chains.orders_chain`` (validate -> charge
-> review (pauses over 100) -> notify); the CLI child imports the same chain from
``tests.cli.app`` and reaches the same store through ``--db``.
"""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.chains import orders_chain
from tests.support.proc import ROOT, child_env
from tether import Checkpointer
from tether.store.sqlite import SCHEMA_VERSION

APP = "tests.cli.app:app"


def tether_cli(db_url: str | None, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m tether.cli *args`` (with ``--db db_url``) and return the process."""
    argv = [sys.executable, "-m", "tether.cli", *args]
    if db_url is not None:
        argv += ["--db", db_url]
    extra = {"COLUMNS": "200", **env}
    if db_url is not None:
        extra["TETHER_DATABASE_URL"] = db_url
    child = child_env(**extra)
    if "TETHER_APP" not in env:
        child.pop("TETHER_APP", None)
    return subprocess.run(
        argv,
        env=child,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def paused_run(store: Checkpointer, amount: int = 500) -> str:
    result = orders_chain(store).run({"order_id": "A-1", "amount": amount})
    assert result.status == "paused"
    return result.execution_id


def completed_run(store: Checkpointer, amount: int = 50) -> str:
    result = orders_chain(store).run({"order_id": "B-2", "amount": amount})
    assert result.status == "completed"
    return result.execution_id


def test_runs_list_prints_runs_and_filters_and_json_parses(store, db_url):
    done, paused = completed_run(store), paused_run(store)

    listed = as_json(tether_cli(db_url, "runs", "list", "--json"))
    assert {r["execution_id"]: r["status"] for r in listed} == {
        done: "completed",
        paused: "paused",
    }
    assert all(r["runner_name"] == "orders" and r["runner_kind"] == "chain" for r in listed)

    only_paused = as_json(tether_cli(db_url, "runs", "list", "--status", "paused", "--json"))
    assert [r["execution_id"] for r in only_paused] == [paused]
    assert as_json(tether_cli(db_url, "runs", "list", "--name", "other", "--json")) == []
    assert len(as_json(tether_cli(db_url, "runs", "list", "--limit", "1", "--json"))) == 1

    table = tether_cli(db_url, "runs", "list")
    assert table.returncode == 0, table.stderr
    assert done in table.stdout and paused in table.stdout and "chain:orders" in table.stdout


def test_runs_show_json_gives_each_rows_input_and_output_such_as_tool_arguments(store, db_url):
    from tether import Agent
    from tether.testing import ScriptedLLM

    def lookup(order_id: str, note: str) -> str:
        """Look an order up."""
        return f"{order_id}: shipped"

    args = {"order_id": "C-3", "note": "x" * 300}
    llm = ScriptedLLM([[{"name": "lookup", "arguments": args}], "It shipped."])
    result = Agent("helper", llm=llm, tools=[lookup], checkpointer=store).run("Where is C-3?")
    assert result.status == "completed"
    rows = as_json(tether_cli(db_url, "runs", "show", result.execution_id, "--json"))
    by_node = {r["node_id"]: r for r in rows["checkpoints"]}
    tool_row = by_node["turn:0/tool:lookup"]
    assert tool_row["node_input"]["arguments"] == args
    assert tool_row["node_input"]["name"] == "lookup"
    assert by_node["run_end"]["node_output"] == {"output": "It shipped."}


def test_runs_show_prints_timeline_with_key_level_state_diffs(store, db_url):
    eid = completed_run(store)

    shown = as_json(tether_cli(db_url, "runs", "show", eid, "--json"))
    rows = shown["checkpoints"]
    assert [r["node_id"] for r in rows] == ["validate", "charge", "notify", "run_end"]
    assert [r["seq"] for r in rows] == sorted(r["seq"] for r in rows)
    by_node = {r["node_id"]: r for r in rows}
    assert by_node["validate"]["diff"] == {"added": ["log", "valid"], "changed": [], "removed": []}
    assert by_node["charge"]["diff"] == {"added": ["receipt"], "changed": ["log"], "removed": []}
    assert by_node["notify"]["diff"]["added"] == ["notified"]
    assert by_node["run_end"]["step_type"] == "run_end"
    assert shown["run"]["status"] == "completed"
    assert shown["pending_interrupt"] is None
    assert list(shown["idempotency"].values()) == [{"charged": 50, "order_id": "B-2"}]

    text = tether_cli(db_url, "runs", "show", eid)
    assert text.returncode == 0, text.stderr
    for fragment in ("validate", "run_end", "+receipt", "~log", "+notified", "idempotency cache"):
        assert fragment in text.stdout


def test_runs_show_and_pending_list_show_the_pending_interrupt(store, db_url):
    eid = paused_run(store)

    shown = as_json(tether_cli(db_url, "runs", "show", eid, "--json"))
    assert shown["pending_interrupt"]["node_id"] == "review"
    assert shown["pending_interrupt"]["state"] == "waiting"
    assert "pending interrupt" in tether_cli(db_url, "runs", "show", eid).stdout

    pending = as_json(tether_cli(db_url, "pending", "list", "--json"))
    assert len(pending) == 1
    assert pending[0]["execution_id"] == eid
    assert pending[0]["runner_name"] == "orders"
    assert pending[0]["reason"] == "manager_approval"
    assert pending[0]["context"] == {"amount": 500}
    table = tether_cli(db_url, "pending", "list")
    assert eid in table.stdout and "manager_approval" in table.stdout


def test_approve_with_app_completes_the_run_and_a_second_approve_exits_2(store, db_url):
    eid = paused_run(store)

    first = tether_cli(
        db_url, "approve", eid, "--app", APP, "--note", "looks fine", "--data", '{"x": 1}'
    )
    assert first.returncode == 0, first.stderr
    assert "completed" in first.stdout
    run = store.get_run(eid)
    assert run is not None and run.status == "completed"
    assert store.get_pending_interrupt(eid) is None

    second = tether_cli(db_url, "approve", eid, "--app", APP)
    assert second.returncode == 2
    assert "already answered" in second.stderr
    assert "Traceback" not in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1


def test_approve_with_app_passes_data_and_note_to_the_resumed_step(store, db_url):
    eid = paused_run(store)

    out = as_json(
        tether_cli(
            db_url, "approve", eid, "--app", APP, "--data", "[1, 2]", "--note", "ok", "--json"
        )
    )
    assert out["action"] == "approved" and out["status"] == "completed"
    assert out["output"]["approved"] is True and out["output"]["notified"] is True
    interrupted = [cp for cp in store.list(eid) if cp.status == "interrupted"]
    assert interrupted  # the pause stays in the timeline


def test_reject_with_app_takes_the_reject_route(store, db_url):
    eid = paused_run(store)

    out = as_json(tether_cli(db_url, "reject", eid, "--app", APP, "--note", "too much", "--json"))
    assert out["status"] == "completed"
    assert out["output"]["approved"] is False and out["output"]["rejected"] is True


def test_unknown_execution_id_exits_3(store, db_url):
    completed_run(store)  # the store exists and has runs, just not this one
    for args in (
        ("runs", "show", "nope"),
        ("approve", "nope"),
        ("reject", "nope", "--app", APP),
        ("resume", "nope", "--app", APP),
        ("fork", "nope", "--app", APP),
    ):
        proc = tether_cli(db_url, *args)
        assert proc.returncode == 3, (args, proc.stderr)
        assert "nope" in proc.stderr and "Traceback" not in proc.stderr


def test_approve_of_a_run_that_never_paused_exits_3(store, db_url):
    eid = completed_run(store)
    proc = tether_cli(db_url, "approve", eid)
    assert proc.returncode == 3
    assert "not waiting for an answer" in proc.stderr


def test_bad_input_exits_4_and_leaves_the_run_paused(store, db_url):
    eid = paused_run(store)

    bad_json = tether_cli(db_url, "approve", eid, "--app", APP, "--data", "{not json")
    assert bad_json.returncode == 4
    assert "--data is not valid JSON" in bad_json.stderr

    for typed, said in (
        ('{"cap": 1, "cap": 2}', "the key 'cap' appears twice"),
        (
            '{"a": ["\\udfff"]}',
            "lone surrogate escape (\\ud800 to \\udfff, not a character) is in a[0]",
        ),
    ):
        ambiguous = tether_cli(db_url, "approve", eid, "--app", APP, "--data", typed)
        assert ambiguous.returncode == 4, ambiguous.stderr
        assert "--data is not valid JSON" in ambiguous.stderr and said in ambiguous.stderr

    no_app = tether_cli(db_url, "resume", eid)
    assert no_app.returncode == 4 and "--app" in no_app.stderr

    unanswered = tether_cli(db_url, "resume", eid, "--app", APP)
    assert unanswered.returncode == 4
    assert "needs an answer" in unanswered.stderr

    bad_app = tether_cli(db_url, "approve", eid, "--app", "tests.cli.app:not_a_runner")
    assert bad_app.returncode == 4 and "not_a_runner" in bad_app.stderr
    missing_module = tether_cli(db_url, "approve", eid, "--app", "no_such_module_xyz:app")
    assert missing_module.returncode == 4 and "no_such_module_xyz" in missing_module.stderr

    bad_age = tether_cli(db_url, "prune", "--older-than", "30 weeks")
    assert bad_age.returncode == 4 and "duration" in bad_age.stderr

    pending = store.get_pending_interrupt(eid)
    assert pending is not None and pending.resume_value is None


def test_approve_without_app_stores_the_answer_and_resume_with_app_completes(store, db_url):
    eid = paused_run(store)

    stored = tether_cli(db_url, "approve", eid, "--note", "from the phone")
    assert stored.returncode == 0, stored.stderr
    assert "answer stored" in stored.stdout and "tether resume" in stored.stdout
    pending = store.get_pending_interrupt(eid)
    assert pending is not None
    assert pending.resume_value == {
        "approved": True,
        "data": None,
        "metadata": {"via": "cli", "answered_by": getpass.getuser(), "note": "from the phone"},
    }
    run = store.get_run(eid)
    assert run is not None and run.status == "paused"

    again = tether_cli(db_url, "reject", eid)
    assert again.returncode == 2  # answered already: exactly one answer per interrupt

    resumed = as_json(tether_cli(db_url, "resume", eid, "--json", "--app", APP))
    assert resumed["action"] == "resumed" and resumed["status"] == "completed"
    assert resumed["output"]["approved"] is True
    assert store.get_pending_interrupt(eid) is None

    finished = tether_cli(db_url, "resume", eid, "--app", APP)
    assert finished.returncode == 2


def test_app_given_as_a_single_runner_or_a_list_works(store, db_url):
    first, second = paused_run(store), paused_run(store)
    for eid, spec in ((first, "tests.cli.app:orders"), (second, "tests.cli.app:runner_list")):
        proc = tether_cli(db_url, "approve", eid, "--app", spec)
        assert proc.returncode == 0, proc.stderr
        run = store.get_run(eid)
        assert run is not None and run.status == "completed"


def test_tether_app_environment_variable_supplies_the_app(store, db_url):
    eid = paused_run(store)
    proc = tether_cli(db_url, "approve", eid, "--json", TETHER_APP=APP)
    assert as_json(proc)["status"] == "completed"


def test_fork_creates_a_new_run_and_leaves_the_original(store, db_url):
    eid = completed_run(store)
    before = [cp.checkpoint_id for cp in store.list(eid)]
    validate_cp = store.list(eid)[0].checkpoint_id

    out = as_json(
        tether_cli(
            db_url,
            "fork",
            eid,
            "--app",
            APP,
            "--checkpoint",
            validate_cp,
            "--state",
            '{"amount": 70}',
            "--json",
        )
    )
    assert out["action"] == "forked" and out["parent_execution_id"] == eid
    assert out["execution_id"] != eid and out["status"] == "completed"
    assert out["output"]["receipt"] == {"charged": 70, "order_id": "B-2"}
    branch = store.get_run(out["execution_id"])
    assert branch is not None and branch.parent_execution_id == eid
    assert [cp.checkpoint_id for cp in store.list(eid)] == before

    latest = as_json(tether_cli(db_url, "fork", eid, "--app", APP, "--json"))
    assert latest["execution_id"] not in (eid, out["execution_id"])

    missing = tether_cli(db_url, "fork", eid, "--app", APP, "--checkpoint", "nope")
    assert missing.returncode == 3


def test_prune_dry_run_reports_then_prune_deletes_only_finished_runs(store, db_url):
    done = [completed_run(store), completed_run(store, amount=-5)]
    paused = paused_run(store)

    dry = as_json(tether_cli(db_url, "prune", "--older-than", "0s", "--dry-run", "--json"))
    assert dry["dry_run"] is True
    assert sorted(dry["execution_ids"]) == sorted(done)
    assert all(store.get_run(eid) is not None for eid in done)

    kept = as_json(tether_cli(db_url, "prune", "--older-than", "30d", "--json"))
    assert kept["runs"] == 0

    real = tether_cli(db_url, "prune", "--older-than", "0s")
    assert real.returncode == 0, real.stderr
    assert "deleted 2 finished run(s)" in real.stdout
    assert all(store.get_run(eid) is None for eid in done)
    assert store.get_run(paused) is not None
    assert store.get_pending_interrupt(paused) is not None
    assert store.list(paused)


def test_prune_deletes_many_runs_in_batches_with_progress(store, db_url):
    done = [completed_run(store) for _ in range(7)]
    out = as_json(tether_cli(db_url, "prune", "--older-than", "0.0m", "--json"))
    assert sorted(out["execution_ids"]) == sorted(done)
    assert out["runs"] == 7 and out["checkpoints"] == 7 * 4
    assert store.list_runs() == []


def test_db_migrate_on_an_existing_store_prints_the_schema_version(store, db_url):
    out = as_json(tether_cli(db_url, "db", "migrate", "--json"))
    assert out["schema_version"] is None or out["schema_version"] >= 1


# --- SQLite files -------------------------------------------------------------------------


def test_db_migrate_creates_a_fresh_sqlite_file(tmp_path: Path):
    path = tmp_path / "fresh" / "tether.db"
    url = f"sqlite:///{path}"

    missing = tether_cli(url, "runs", "list")
    assert missing.returncode == 5 and "db migrate" in missing.stderr
    assert not path.exists()

    proc = tether_cli(url, "db", "migrate")
    assert proc.returncode == 0, proc.stderr
    assert f"schema version {SCHEMA_VERSION}" in proc.stdout
    assert path.exists()
    assert as_json(tether_cli(url, "runs", "list", "--json")) == []


def test_a_file_that_is_not_a_database_exits_5(tmp_path: Path):
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 100)
    for args in (("runs", "list"), ("db", "migrate"), ("pending", "list")):
        proc = tether_cli(f"sqlite:///{path}", *args)
        assert proc.returncode == 5, (args, proc.stderr)
        assert "not a readable tether SQLite database" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert path.read_text().startswith("these are my notes")


def test_a_directory_as_the_store_exits_4_naming_it_and_creates_nothing(tmp_path: Path):
    where = tmp_path / "runs"
    where.mkdir()
    url = f"sqlite:///{where}"
    # Before: "StoreUnavailableError: ... cannot be written: unable to open database file",
    # exit 5 (unavailable: worth retrying), for the reading and the writing commands alike.
    for args in (("runs", "list"), ("db", "migrate"), ("pending", "list")):
        proc = tether_cli(url, *args)
        assert proc.returncode == 4, (args, proc.stderr)
        assert "ConfigurationError" in proc.stderr and "is a directory" in proc.stderr
        assert repr(str(where)) in proc.stderr and "Traceback" not in proc.stderr
    from_env = tether_cli(None, "db", "migrate", TETHER_DATABASE_URL=url)
    assert from_env.returncode == 4 and "is a directory" in from_env.stderr, from_env.stderr
    (tmp_path / "notes").write_text("my notes\n")
    under_a_file = tether_cli(f"sqlite:///{tmp_path / 'notes' / 't.db'}", "db", "migrate")
    assert under_a_file.returncode == 4, under_a_file.stderr  # before: FileExistsError, exit 1
    assert "is a file, not a directory" in under_a_file.stderr
    assert list(where.iterdir()) == [] and (tmp_path / "notes").read_text() == "my notes\n"


def test_a_dangling_or_looping_symlink_as_the_store_exits_4_naming_the_link(tmp_path: Path):
    (tmp_path / "gone").symlink_to("missing")
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    for path, link, why in (
        (tmp_path / "gone" / "t.db", tmp_path / "gone", "which does not exist"),
        (tmp_path / "loop1", tmp_path / "loop1", "loops"),
        (tmp_path / "loop1" / "t.db", tmp_path / "loop1", "loops"),
    ):
        # Before: StoreUnavailableError "File exists" / "unable to open database file", exit 5.
        for args in (("runs", "list"), ("db", "migrate")):
            proc = tether_cli(f"sqlite:///{path}", *args)
            assert proc.returncode == 4, (path, args, proc.stderr)
            assert "ConfigurationError" in proc.stderr and why in proc.stderr, proc.stderr
            assert repr(str(link)) in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gone", "loop1", "loop2"]


def test_a_nul_byte_or_an_overlong_name_in_the_store_path_exits_4(tmp_path: Path):
    for url, why in (
        (f"sqlite:///{tmp_path / 'a'}%00b.db", "NUL"),
        (f"sqlite:///{tmp_path / ('x' * 300)}.db", "too long"),
    ):
        for args in (("runs", "list"), ("db", "migrate")):
            proc = tether_cli(url, *args)  # before: a raw ValueError / OSError, exit 1
            assert proc.returncode == 4, (url[:40], args, proc.stderr)
            assert "ConfigurationError" in proc.stderr and why in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_leading_tilde_in_the_store_path_is_the_home_directory(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    url = "sqlite:///~/runs/t.db"

    def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "tether.cli", *args]
        child = child_env(COLUMNS="200", HOME=str(home), **env)
        return subprocess.run(argv, env=child, capture_output=True, text=True, cwd=tmp_path)

    # Before: the store was './~/runs/t.db', under a directory literally named '~'.
    migrated = cli("--db", url, "db", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert (home / "runs" / "t.db").is_file() and not (tmp_path / "~").exists()
    listed = cli("runs", "list", "--json", TETHER_DATABASE_URL=url)
    assert listed.returncode == 0 and json.loads(listed.stdout) == [], listed.stderr


def test_an_sqlite_file_uri_or_a_query_on_the_store_url_exits_4(tmp_path: Path):
    path = tmp_path / "t.db"
    assert tether_cli(f"sqlite:///{path}", "db", "migrate").returncode == 0
    before = path.read_bytes()
    for url, why in (
        (f"sqlite:///file:{path}?mode=ro", "URI"),
        (f"sqlite:///{path}?mode=ro", "query"),
    ):
        # Before: exit 0, the query dropped: opened writable, migrating what was to be read.
        for args in (("runs", "list"), ("db", "migrate")):
            proc = tether_cli(url, *args)
            assert proc.returncode == 4, (url, args, proc.stderr)
            assert why in proc.stderr and "read_only=True" in proc.stderr, proc.stderr
    assert path.read_bytes() == before


def test_unknown_url_scheme_exits_4(tmp_path: Path):
    proc = tether_cli("mysql://localhost/x", "runs", "list")
    assert proc.returncode == 4 and "unknown database URL scheme" in proc.stderr


@pytest.mark.parametrize(
    "url",
    ["postgresql://postgres:s3cret@[::1/test", "sqlite://[x/a.db"],
    ids=["postgres", "sqlite"],
)
def test_a_url_that_cannot_be_parsed_exits_4_saying_why_without_the_password(url: str):
    # Before: "tether: ValueError: Invalid IPv6 URL", exit 1 (an unexpected error).
    proc = tether_cli(url, "runs", "list")
    assert proc.returncode == 4, proc.stderr
    assert "ConfigurationError: cannot parse a" in proc.stderr and "Invalid IPv6 URL" in proc.stderr
    assert "s3cret" not in proc.stderr + proc.stdout


def test_connect_refuses_a_url_that_cannot_be_parsed_with_a_configuration_error():
    import tether
    from tether.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="cannot parse a postgresql:// URL"):
        tether.connect("postgresql://postgres@[::1/test")


def test_help_and_version_exit_0():
    assert tether_cli(None, "--help").returncode == 0
    version = tether_cli(None, "--version")
    assert version.returncode == 0 and "0.1.0" in version.stdout


def test_importing_tether_does_not_import_click_or_rich():
    code = (
        "import sys, tether, tether.registry; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('click', 'rich')))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_installed_console_script_runs(tmp_path: Path):
    script = Path(sys.executable).with_name("tether")
    if not script.exists():
        pytest.skip("the tether console script is not installed in this environment")
    url = f"sqlite:///{tmp_path / 't.db'}"
    proc = subprocess.run(
        [str(script), "db", "migrate", "--db", url],
        env=child_env(),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
