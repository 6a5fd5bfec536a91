"""SQLite-specific hostile files: newer schema, not a database, truncated, read-only; paths
that cannot name a database file (a directory, under a regular file, a FIFO)."""

from __future__ import annotations

import os
import sqlite3
import time

import pytest

import tether
from tests.support.results import run_of
from tether import Chain, SQLiteCheckpointer
from tether.errors import (
    ConfigurationError,
    CorruptRecordError,
    SchemaVersionError,
    StoreError,
    StoreUnavailableError,
)


def _one_run(path):
    store = SQLiteCheckpointer(path)
    chain = Chain("c", store)
    chain.add_node("a", lambda s: {"a": 1})
    eid = chain.run({}).execution_id
    store.close()
    return eid


def test_a_file_from_a_newer_schema_version_is_refused_and_left_intact(tmp_path):
    path = tmp_path / "t.db"
    eid = _one_run(path)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO tether_schema VALUES (99, 0)")
    with pytest.raises(SchemaVersionError) as info:
        SQLiteCheckpointer(path)
    assert info.value.found == 99 and "upgrade tether" in str(info.value)
    with sqlite3.connect(path) as conn:
        assert (
            conn.execute(
                "SELECT COUNT(*) FROM checkpoints WHERE execution_id = ?", (eid,)
            ).fetchone()[0]
            == 2
        )


def test_a_file_that_is_not_a_database(tmp_path):
    path = tmp_path / "t.db"
    path.write_bytes(b"this is a text file, not sqlite" * 100)
    with pytest.raises(CorruptRecordError, match="not a readable tether SQLite database"):
        SQLiteCheckpointer(path)
    assert path.read_bytes().startswith(b"this is a text file")


def test_a_truncated_database_gives_a_store_error(tmp_path):
    path = tmp_path / "t.db"
    _one_run(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(StoreError):
        store = SQLiteCheckpointer(path)
        store.list_runs()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_a_read_only_database_refuses_writes_clearly(tmp_path):  # pragma: no cover - root here
    path = tmp_path / "t.db"
    eid = _one_run(path)
    os.chmod(path, 0o444)
    with pytest.raises(StoreUnavailableError, match="may not write"):
        SQLiteCheckpointer(path)
    reader = SQLiteCheckpointer(path, read_only=True)
    assert run_of(reader, eid).status == "completed"
    reader.close()


def _held(path):
    """Another connection holding the file's write lock (``BEGIN IMMEDIATE``), as a worker's
    write does while it runs."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE runs SET updated_at = updated_at")
    return conn


def test_opening_a_current_store_does_not_wait_for_a_writer_holding_the_lock(tmp_path):
    path = tmp_path / "t.db"
    eid = _one_run(path)
    holder = _held(path)
    try:
        for read_only in (False, True):
            started = time.monotonic()
            # Before, opening ran the schema setup in a write transaction: it waited out the
            # busy timeout, then raised StoreUnavailableError "stayed locked".
            store = SQLiteCheckpointer(path, busy_timeout_seconds=2, read_only=read_only)
            assert run_of(store, eid).status == "completed"
            assert "a" in [c.node_id for c in store.list(eid)]
            assert time.monotonic() - started < 1.5
            store.close()
    finally:
        holder.rollback()
        holder.close()


def test_a_read_only_store_reads_refuses_every_write_and_creates_nothing(tmp_path):
    path = tmp_path / "t.db"
    eid = _one_run(path)
    before = path.read_bytes()
    store = SQLiteCheckpointer(path, read_only=True)
    assert store.read_only and "read_only=True" in repr(store)
    assert run_of(store, eid).status == "completed" and store.schema_version() > 0
    with pytest.raises(StoreUnavailableError, match="opened read-only"):
        store.delete_run(eid)
    with pytest.raises(StoreUnavailableError, match="opened read-only"):
        Chain("c", store).add_node("a", lambda s: {"a": 1}).run({})
    assert run_of(store, eid).status == "completed"
    store.close()
    assert path.read_bytes() == before
    with pytest.raises(StoreUnavailableError, match="creates nothing"):
        SQLiteCheckpointer(tmp_path / "missing.db", read_only=True)
    assert not (tmp_path / "missing.db").exists()
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER)")
    conn.close()
    with pytest.raises(StoreUnavailableError, match="not a tether store"):
        SQLiteCheckpointer(other, read_only=True)


def test_corrupt_state_row_is_a_clear_error(tmp_path):
    path = tmp_path / "t.db"
    eid = _one_run(path)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE checkpoints SET state = ? WHERE execution_id = ? AND seq = 1",
            (b"{not json", eid),
        )
    store = SQLiteCheckpointer(path)
    with pytest.raises(CorruptRecordError, match="not valid JSON"):
        store.list(eid)
    assert run_of(store, eid).status == "completed"


def _entries(where):
    return sorted(p.name for p in where.iterdir())


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "read_only"])
def test_a_directory_as_the_path_is_a_configuration_error_naming_it_and_creating_nothing(
    tmp_path, read_only
):
    where = tmp_path / "runs"
    where.mkdir()
    # Before: StoreUnavailableError "cannot be written: unable to open database file", the one
    # store error that is worth retrying, so a worker retried it for ever.
    with pytest.raises(ConfigurationError, match="is a directory") as info:
        SQLiteCheckpointer(where, read_only=read_only)
    assert repr(str(where)) in str(info.value)
    assert str(where / "tether.db") in str(info.value)  # what to write instead
    with pytest.raises(ConfigurationError, match="is a directory"):
        tether.connect(f"sqlite:///{where}", read_only=read_only)
    assert _entries(where) == [] and _entries(tmp_path) == ["runs"]


def test_a_path_ending_in_a_separator_is_a_configuration_error_and_creates_nothing(tmp_path):
    # Before: SQLite created a database file named "new", where a directory was meant.
    path = f"{tmp_path / 'new'}{os.sep}"
    with pytest.raises(ConfigurationError, match="names a directory") as info:
        SQLiteCheckpointer(path)
    assert repr(path) in str(info.value)
    assert _entries(tmp_path) == []


def test_a_path_under_a_regular_file_is_a_configuration_error_naming_that_file(tmp_path):
    notes = tmp_path / "notes"
    notes.write_text("my notes\n")
    for path in (notes / "t.db", notes / "sub" / "t.db"):
        # Before: a raw FileExistsError or NotADirectoryError from creating the directories.
        with pytest.raises(ConfigurationError, match="is a file, not a directory") as info:
            SQLiteCheckpointer(path)
        assert repr(str(path)) in str(info.value) and repr(str(notes)) in str(info.value)
    assert notes.read_text() == "my notes\n" and _entries(tmp_path) == ["notes"]


def test_a_path_that_is_not_a_regular_file_is_a_configuration_error(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for read_only in (False, True):
        with pytest.raises(ConfigurationError, match="not a regular file") as info:
            SQLiteCheckpointer(fifo, read_only=read_only)
        assert repr(str(fifo)) in str(info.value)
    assert _entries(tmp_path) == ["pipe"]


def test_a_new_path_whose_directories_do_not_exist_yet_is_created_with_them(tmp_path):
    path = tmp_path / "a" / "b" / "t.db"
    eid = _one_run(path)
    assert run_of(SQLiteCheckpointer(path, read_only=True), eid).status == "completed"
    memory = tether.connect("sqlite://:memory:")
    assert memory.path == ":memory:"  # type: ignore[attr-defined]
    memory.close()


def _broken_links(where):
    """Links that can never lead to a database file, by what their error must say."""
    os.symlink("missing", where / "gone")  # a directory link whose directory is not there
    os.symlink("loop2", where / "loop1")
    os.symlink("loop1", where / "loop2")
    os.symlink(os.path.join("nowhere", "t.db"), where / "dangling.db")  # no 'nowhere' either
    return {
        where / "gone" / "t.db": (where / "gone", "'missing', which does not exist"),
        where / "loop1": (where / "loop1", "loops"),
        where / "loop1" / "t.db": (where / "loop1", "loops"),
        where / "dangling.db": (where / "dangling.db", "does not exist"),
    }


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "read_only"])
def test_a_dangling_or_looping_symlink_in_the_path_is_a_configuration_error_naming_the_link(
    tmp_path, read_only
):
    cases = _broken_links(tmp_path)
    made = _entries(tmp_path)
    for path, (link, why) in cases.items():
        # Before: StoreUnavailableError "cannot be written: File exists" or "unable to open
        # database file" (exit 5, retried for ever by a worker).
        with pytest.raises(ConfigurationError, match=why) as info:
            SQLiteCheckpointer(path, read_only=read_only)
        assert repr(str(path)) in str(info.value) and repr(str(link)) in str(info.value)
        assert "symbolic link" in str(info.value)
        with pytest.raises(ConfigurationError, match=why):
            tether.connect(f"sqlite:///{path}", read_only=read_only)
    assert _entries(tmp_path) == made  # nothing created where a link points nowhere


def test_a_dangling_file_symlink_whose_directory_exists_creates_its_target(tmp_path):
    (tmp_path / "data").mkdir()
    os.symlink(os.path.join("data", "t.db"), tmp_path / "t.db")
    eid = _one_run(tmp_path / "t.db")  # SQLite follows the link and creates data/t.db
    assert (tmp_path / "data" / "t.db").is_file()
    assert run_of(SQLiteCheckpointer(tmp_path / "t.db", read_only=True), eid).status == "completed"


def test_a_nul_byte_in_the_path_is_a_configuration_error_showing_it_escaped(tmp_path):
    path = f"{tmp_path / 'a'}\x00b.db"
    # Before: a raw ValueError "embedded null byte", from connect() and the CLI alike (exit 1).
    with pytest.raises(ConfigurationError, match="NUL") as info:
        SQLiteCheckpointer(path)
    assert repr(path) in str(info.value) and "\\x00" in str(info.value)
    with pytest.raises(ConfigurationError, match="NUL"):
        tether.connect(f"sqlite:///{tmp_path / 'a'}%00b.db")
    assert _entries(tmp_path) == []


def test_a_name_too_long_for_the_filesystem_is_a_configuration_error_naming_the_path(tmp_path):
    long = "x" * 300
    for path in (tmp_path / f"{long}.db", tmp_path / long / long / "t.db"):
        # Before: a raw OSError ENAMETOOLONG (exit 1).
        with pytest.raises(ConfigurationError, match="too long") as info:
            SQLiteCheckpointer(path)
        longest = max(len(name) for name in path.parts)
        assert repr(str(path)) in str(info.value) and f"{longest} bytes" in str(info.value)
    assert _entries(tmp_path) == []


def test_a_leading_tilde_is_the_home_directory(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    # Before: a directory literally named '~' in the working directory.
    eid = _one_run("~/runs/t.db")
    store = tether.connect("sqlite:///~/runs/t.db", read_only=True)
    assert store.path == str(home / "runs" / "t.db")  # type: ignore[attr-defined]
    assert run_of(store, eid).status == "completed"
    store.close()
    assert _entries(tmp_path) == ["home"] and "t.db" in _entries(home / "runs")


def test_a_tilde_naming_no_home_directory_is_a_configuration_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="home directory") as info:
        SQLiteCheckpointer("~no-such-user-here/t.db")
    assert "'~no-such-user-here/t.db'" in str(info.value)
    assert _entries(tmp_path) == []


def test_an_sqlite_file_uri_is_refused_saying_to_use_a_plain_path_and_read_only(tmp_path):
    path = tmp_path / "t.db"
    _one_run(path)
    before = path.read_bytes()
    # Before: SQLite took 'file:' as a URI, but connect() dropped the query, so the store
    # opened writable (and would migrate) the file its user asked to read.
    for how in (
        lambda: SQLiteCheckpointer(f"file:{path}?mode=ro"),
        lambda: tether.connect(f"sqlite:///file:{path}?mode=ro"),
        lambda: tether.connect(f"sqlite:///file:{path}"),
    ):
        with pytest.raises(ConfigurationError, match="URI") as info:
            how()
        assert "plain path" in str(info.value) and "read_only=True" in str(info.value)
    # A query on a plain path was dropped as silently; a '?' meant for a file name too.
    for url in (f"sqlite:///{path}?mode=ro", f"sqlite:///{tmp_path / 'a'}?b.db"):
        with pytest.raises(ConfigurationError, match="query") as info:
            tether.connect(url)
        assert "read_only=True" in str(info.value) and "%3F" in str(info.value)
    assert path.read_bytes() == before and _entries(tmp_path) == ["t.db"]
