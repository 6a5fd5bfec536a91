"""The ``tether`` command at its edges, in subprocesses on both backends: options before the
command, the ``queued`` status, either spelling of a runner, enqueueing an unknown runner."""

from __future__ import annotations

from tests.cli.test_cli import APP, as_json, paused_run, tether_cli
from tether.worker_process import enqueue


def test_global_options_before_the_command_act_as_the_commands_own(store, db_url):
    eid = paused_run(store)
    before = tether_cli(None, "--db", db_url, "--json", "runs", "list", TETHER_DATABASE_URL="")
    assert [r["execution_id"] for r in as_json(before)] == [eid]
    # The command's own --db still wins over the one before it.
    wins = tether_cli(None, "--db", "sqlite:///nowhere.db", "runs", "list", "--db", db_url)
    assert wins.returncode == 0, wins.stderr
    assert eid in wins.stdout


def test_queued_is_a_status_filter_and_a_runner_filters_by_either_spelling(store, db_url):
    paused = paused_run(store)
    queued = enqueue(store, "orders", {"order_id": "Q-1", "amount": 5})
    only = as_json(tether_cli(db_url, "runs", "list", "--status", "queued", "--json"))
    assert [r["execution_id"] for r in only] == [queued]
    for name in ("orders", "chain:orders"):
        found = tether_cli(db_url, "runs", "list", "--status", "paused", "--name", name, "--json")
        assert [r["execution_id"] for r in as_json(found)] == [paused], name
    table = tether_cli(db_url, "runs", "list", "--status", "queued")
    assert table.returncode == 0 and " orders " in table.stdout and ":orders" not in table.stdout


def test_enqueue_refuses_a_runner_the_app_lacks_and_warns_without_an_app(store, db_url):
    paused_run(store)
    refused = tether_cli(db_url, "enqueue", "--app", APP, "unknown-runner", "{}")
    assert refused.returncode == 4
    assert "unknown-runner" in refused.stderr and "loop, orders" in refused.stderr
    assert store.list_runs(status="queued") == []
    accepted = tether_cli(db_url, "enqueue", "--app", APP, "chain:orders", "{}")
    assert accepted.returncode == 0, accepted.stderr
    assert store.get_run(accepted.stdout.strip()).runner_name == "orders"
    warned = tether_cli(db_url, "enqueue", "unknown-runner", "{}")
    assert warned.returncode == 0
    assert "no run of a runner named 'unknown-runner'" in warned.stderr
    assert "runners seen: orders" in warned.stderr


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_reading_a_schema_that_holds_no_store_names_it_and_creates_nothing():
    import psycopg

    from tests.conftest import PG_DSN, require_postgres

    require_postgres()
    typo = f"{PG_DSN}?schema=tethr_typo_i20"
    for args in (("runs", "list"), ("pending", "list"), ("runs", "show", "x")):
        proc = tether_cli(typo, *args)
        assert proc.returncode == 5, proc.stderr
        assert "no tether store in schema 'tethr_typo_i20'" in _one_line(proc.stderr)
    with psycopg.connect(PG_DSN) as conn:
        found = conn.execute(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = 'tethr_typo_i20'"
        ).fetchone()
    assert found is None


def test_reading_another_apps_sqlite_file_or_an_empty_file_changes_neither(tmp_path):
    import sqlite3

    other = tmp_path / "crm.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER)")
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    for path, said in ((other, "not a tether store (customers)"), (empty, "an empty file")):
        before = path.read_bytes()
        for args in (("runs", "list"), ("pending", "list"), ("runs", "show", "x")):
            proc = tether_cli(f"sqlite:///{path}", *args)
            assert proc.returncode == 5, proc.stderr
            assert said in _one_line(proc.stderr) and "check --db" in proc.stderr
        assert path.read_bytes() == before
    created = tmp_path / "new.db"
    queued = tether_cli(f"sqlite:///{created}", "enqueue", "orders", "{}")
    assert queued.returncode == 0, queued.stderr  # the first write creates the store
    listed = as_json(tether_cli(f"sqlite:///{created}", "runs", "list", "--json"))
    assert [r["status"] for r in listed] == ["queued"]


def test_an_unreachable_database_fails_in_seconds_with_one_line(tmp_path):
    import time

    from tests.conftest import PG_DSN, require_postgres

    require_postgres()
    base = PG_DSN.rsplit("/", 1)[0]
    commands = [("runs", "list"), ("db", "migrate"), ("enqueue", "orders", "{}")]
    urls = (f"{base}/no_such_db_i20", "postgresql://postgres@127.0.0.1:1/test")
    # `db migrate` and `enqueue` (which create a missing store) waited 30 s on a database that
    # does not exist, printing psycopg_pool's retries: 330 lines.
    for url, command in [(u, c) for u in urls for c in commands]:
        started = time.monotonic()
        proc = tether_cli(url, *command)
        took = time.monotonic() - started
        assert proc.returncode == 5, proc.stderr
        line = _one_line(proc.stderr)
        assert line.startswith("tether: StoreUnavailableError: cannot connect to"), line
        assert took < 10, took
    assert "no_such_db_i20" in tether_cli(f"{base}/no_such_db_i20", "pending", "list").stderr


def test_a_damaged_row_is_listed_and_marked_and_the_others_read(store, db_url):
    from tests.support.damage import damage

    d = damage(store)
    listed = as_json(tether_cli(db_url, "runs", "list", "--json"))
    by_id = {r["execution_id"]: r for r in listed}
    assert set(by_id) == {*d.good, *d.damaged}
    assert "input unreadable" in by_id[d.bad_input]["damaged"]
    assert all(by_id[e]["damaged"] is None for e in d.good)
    pending = as_json(tether_cli(db_url, "pending", "list", "--json"))
    assert "context unreadable" in {p["execution_id"]: p for p in pending}[d.bad_context]["damaged"]
    for args in (("runs", "list"), ("pending", "list")):
        table = tether_cli(db_url, *args)
        assert table.returncode == 0, table.stderr
        assert "damaged" in table.stdout and all(e in table.stdout for e in d.good)


def test_list_commands_page_with_after_and_filter_pending(store, db_url):
    from tests.support.damage import paused

    for i in range(5):
        paused(store, f"p-{i}")
    first = tether_cli(db_url, "pending", "list", "--limit", "2", "--json")
    assert [p["execution_id"] for p in as_json(first)] == ["p-0", "p-1"]
    assert "2 of 5 shown; next page: tether pending list --after p-1" in first.stderr
    rest = tether_cli(db_url, "pending", "list", "--after", "p-1", "--json")
    assert [p["execution_id"] for p in as_json(rest)] == ["p-2", "p-3", "p-4"]
    assert rest.stderr == ""
    newest = tether_cli(db_url, "pending", "list", "--desc", "--limit", "1", "--json")
    assert [p["execution_id"] for p in as_json(newest)] == ["p-4"]
    found = tether_cli(db_url, "pending", "list", "--search", "p-3", "--runner", "chain:orders")
    assert "p-3" in found.stdout and "p-2" not in found.stdout
    assert as_json(tether_cli(db_url, "pending", "list", "--waiting", "1d", "--json")) == []
    bad = tether_cli(db_url, "pending", "list", "--waiting", "soon")
    assert bad.returncode == 4 and "--waiting 'soon' is not a duration" in bad.stderr
    runs = tether_cli(db_url, "runs", "list", "--limit", "3", "--json")
    assert [r["execution_id"] for r in as_json(runs)] == ["p-4", "p-3", "p-2"]
    more = tether_cli(db_url, "runs", "list", "--after", "p-2", "--search", "p-", "--json")
    assert [r["execution_id"] for r in as_json(more)] == ["p-1", "p-0"]


def test_reading_an_older_store_asks_for_migrate_and_a_write_migrates_it(store, db_url):
    from tests.hostile.conftest import raw_sql
    from tether.store.sqlite import SCHEMA_VERSION

    paused_run(store)
    sql = raw_sql(store)
    # Make the store truly one version older: undo the newest migration (v9, approval
    # deadlines) as well as its version row, so `db migrate` runs it for real.
    assert SCHEMA_VERSION == 9, "undo the newest migration here instead of v9's"
    sql("DROP INDEX {t}pending_due_idx")
    sql("ALTER TABLE {t}pending_interrupts DROP COLUMN due_at")
    sql("DELETE FROM {t}tether_schema WHERE version = ?", (SCHEMA_VERSION,))
    older = tether_cli(db_url, "runs", "list")
    assert older.returncode == 5
    assert f"schema version {SCHEMA_VERSION - 1}" in older.stderr
    assert "tether db migrate" in older.stderr
    assert sql("SELECT MAX(version) FROM {t}tether_schema")[0][0] == SCHEMA_VERSION - 1
    migrated = tether_cli(db_url, "db", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert sql("SELECT MAX(version) FROM {t}tether_schema")[0][0] == SCHEMA_VERSION
    assert len(as_json(tether_cli(db_url, "runs", "list", "--json"))) == 1


def test_serve_on_every_interface_needs_the_names_it_answers_to(store, db_url):
    paused_run(store)
    token = "a-token-of-at-least-16-chars"
    refused = tether_cli(db_url, "serve", "--host", "0.0.0.0", TETHER_UI_TOKEN=token)
    assert refused.returncode == 4
    assert "--allowed-host" in refused.stderr and "answers to no host name" in refused.stderr


def test_a_worker_on_a_mistyped_store_stops_at_once_naming_it(tmp_path):
    from tests.conftest import PG_DSN, require_postgres

    missing = tether_cli(f"sqlite:///{tmp_path / 'typo.db'}", "worker", "--app", APP)
    assert missing.returncode == 5 and "no database at" in missing.stderr
    assert not (tmp_path / "typo.db").exists()
    require_postgres()
    typo = tether_cli(f"{PG_DSN}?schema=tethr_worker_typo", "worker", "--app", APP)
    assert typo.returncode == 5 and "no tether store in schema 'tethr_worker_typo'" in typo.stderr
