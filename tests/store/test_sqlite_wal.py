"""Background WAL checkpoints of the SQLite store: off the step path, the WAL still bounded."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import threading
import time

import pytest

from tests.support.chains import chunk_text, chunks_chain
from tests.support.proc import run_child, run_together
from tests.support.results import last_row
from tests.support.waiting import wait_for
from tether import SQLiteCheckpointer
from tether.errors import ConfigurationError
from tether.store._sqlite_wal import SAFETY_NET_FACTOR

THREAD = "tether-sqlite-wal-checkpoint"
FRAME = 4096 + 24  # a WAL frame: one page (SQLite's default size) and its header
HEADER = 32  # the WAL file's header


def _wal_frames(path) -> float:
    try:
        return (os.path.getsize(f"{path}-wal") - HEADER) / FRAME
    except FileNotFoundError:
        return 0.0


def _threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD]


def _rows_in_main_file(path, tmp_path) -> int:
    """Checkpoint rows in the database file alone, without its WAL: a copy opened immutable
    (SQLite then makes no -wal or -shm of its own for it)."""
    copy = tmp_path / f"main-only-{time.monotonic_ns()}.db"
    shutil.copyfile(path, copy)
    conn = sqlite3.connect(f"file:{copy}?immutable=1", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0])
    except sqlite3.DatabaseError:  # the schema is still only in the WAL, or the copy caught
        return 0  # a checkpoint writing the file (torn): the caller asks again
    finally:
        conn.close()
        copy.unlink()


def test_options_are_checked():
    with pytest.raises(ConfigurationError, match="wal_checkpoint must be"):
        SQLiteCheckpointer(":memory:", wal_checkpoint="sometimes")  # type: ignore[arg-type]
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ConfigurationError, match="wal_checkpoint_pages"):
            SQLiteCheckpointer(":memory:", wal_checkpoint_pages=bad)  # type: ignore[arg-type]


def test_background_checkpoints_are_the_default_under_normal_and_inline_under_full(tmp_path):
    normal = SQLiteCheckpointer(tmp_path / "n.db")
    full = SQLiteCheckpointer(tmp_path / "f.db", synchronous="FULL")
    chosen = SQLiteCheckpointer(tmp_path / "c.db", synchronous="FULL", wal_checkpoint="background")
    try:
        assert (normal.wal_checkpoint, full.wal_checkpoint) == ("background", "inline")
        assert normal._wal is not None and full._wal is None and chosen._wal is not None
    finally:
        for store in (normal, full, chosen):
            store.close()


def test_memory_store_has_no_checkpoint_thread():
    store = SQLiteCheckpointer(":memory:")
    assert chunks_chain(store, steps=300).run({}).status == "completed"
    assert store._wal is None and not _threads()
    store.close()


def test_the_wal_stays_bounded_over_a_long_run(tmp_path):
    """3,000 steps of 1 KB (stored uncompressed) write about 3 WAL frames each: 8,000+ frames
    (34 MB) unchecked.

    Bound: the connections' auto-checkpoint fires at SAFETY_NET_FACTOR * pages frames; it gives
    up while the thread holds the checkpoint lock, so allow one more background interval
    (``pages`` frames) of commits on top: 5,000 frames, 20.6 MB."""
    path = tmp_path / "t.db"
    pages = 1000
    store = SQLiteCheckpointer(path, wal_checkpoint_pages=pages, compress_state_min_bytes=None)
    biggest = [0.0]

    def sample() -> None:
        biggest[0] = max(biggest[0], _wal_frames(path))

    result = chunks_chain(store, steps=3000, on_step=sample).run({})
    assert result.status == "completed" and result.state["chunk"] == chunk_text(3000)
    bound = SAFETY_NET_FACTOR * pages + pages
    assert 0 < biggest[0] <= bound, (biggest[0], bound)
    wal = store._wal
    assert wal is not None and wal.checkpoints >= 3 and wal.errors == 0
    store.close()


def test_checkpoints_run_on_the_thread_while_no_step_runs(tmp_path):
    """The rows reach the database file itself, copied by the store's thread, though the WAL
    never came near the auto-checkpoint threshold."""
    path = tmp_path / "t.db"
    store = SQLiteCheckpointer(path, wal_checkpoint_pages=100)
    ran_on: list[str] = []
    wal = store._wal
    assert wal is not None
    original = wal._checkpointed

    def record(total, result):
        ran_on.append(threading.current_thread().name)
        original(total, result)

    wal._checkpointed = record  # type: ignore[method-assign]
    before = _rows_in_main_file(path, tmp_path)
    result = chunks_chain(store, steps=60).run({})
    assert result.status == "completed"
    # SQLite's own count of the WAL frames written into the database file. (A copy of the file
    # alone is a consistent database only after a checkpoint that copied every frame; one
    # that overlapped a commit copies the frames before it and leaves the file mid-way.)
    wait_for(lambda: wal.last_result is not None and wal.last_result[2] >= 20, "frames copied")
    assert before == 0
    assert ran_on and set(ran_on) == {THREAD}
    assert _wal_frames(path) < SAFETY_NET_FACTOR * 100  # SQLite's inline checkpoint never fired
    store.close()


def test_the_thread_checkpoints_when_the_wal_holds_its_pages_not_on_a_first_guess(tmp_path):
    """The first wake-up comes after ``pages / 4`` commits (a first guess of 4 frames per
    commit). These steps write 2-3 frames each, so it finds the WAL short of ``pages`` (the
    -wal file's size bounds it): it copies nothing and asks to be woken later."""
    path = tmp_path / "t.db"
    pages = 400
    store = SQLiteCheckpointer(path, wal_checkpoint_pages=pages)
    wal = store._wal
    assert wal is not None and wal.every == pages // 4
    assert chunks_chain(store, steps=wal.every + 10).run({}).status == "completed"
    wait_for(lambda: wal.deferred >= 1, "the thread's first wake-up")
    assert wal.checkpoints == 0 and _wal_frames(path) < pages
    assert _rows_in_main_file(path, tmp_path) == 0
    # The first checkpoint's result, seen at the step after it: once it has run, the WAL
    # starts over in a file that keeps its size, so a later wake-up checkpoints what is there
    # (under load one can run before this test looks at last_result).
    first: list[tuple[int, int, int]] = []

    def note_first_checkpoint() -> None:
        if not first and wal.last_result is not None:
            first.append(wal.last_result)

    chain = chunks_chain(store, steps=250, on_step=note_first_checkpoint)
    assert chain.run({}).status == "completed"
    wait_for(lambda: wal.last_result is not None, "a checkpoint")
    result = first[0] if first else wal.last_result
    assert result is not None and result[1] >= pages  # frames when it ran
    assert wal.errors == 0 and result[2] > 0  # frames copied into the database file
    store.close()


def _posix_locks_on(path) -> set[tuple[str, str, str]]:
    """This process's POSIX locks on ``path``, from /proc/locks: (kind, start, end)."""
    inode = os.stat(path).st_ino
    held = set()
    with open("/proc/locks") as f:
        for line in f:
            fields = line.split()
            if fields[1] != "POSIX" or fields[4] != str(os.getpid()):
                continue
            if int(fields[5].rsplit(":", 1)[1]) == inode:
                held.add((fields[3], fields[6], fields[7]))
    return held


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="needs Linux's /proc/locks")
def test_the_thread_leaves_sqlites_locks_on_the_wal_index_alone(tmp_path):
    """Closing any descriptor of a file drops every POSIX lock the process holds on it, SQLite's
    included: a thread that opened and closed the -shm file once left other processes free to
    reset the WAL under this one's readers (three writing processes corrupted the file)."""
    path = tmp_path / "t.db"
    store = SQLiteCheckpointer(path, wal_checkpoint_pages=400)
    wal = store._wal
    assert wal is not None
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM runs").fetchone()  # a read lock on the WAL index
    held = _posix_locks_on(f"{path}-shm")
    assert held, "SQLite holds locks on the -shm file while a read is open"
    assert chunks_chain(store, steps=wal.every + 10).run({}).status == "completed"
    wait_for(lambda: wal.deferred + wal.checkpoints >= 1, "the thread's first wake-up")
    assert held <= _posix_locks_on(f"{path}-shm")
    reader.execute("COMMIT")
    reader.close()
    store.close()


def test_three_processes_writing_one_file_leave_it_intact(tmp_path):
    """Each process has its own checkpoint thread on the shared WAL; none may disturb the
    locks SQLite's connections hold (see the test above: that once corrupted this file)."""
    path = tmp_path / "t.db"
    SQLiteCheckpointer(path).close()  # the schema, before the writers race to create it
    url = f"sqlite:///{path}"
    done = run_together(
        [["-m", "tests.support.child", url, "chunks", "run", f"w{i}", "{}"] for i in range(3)]
    )
    assert [code for code, _, _ in done] == [0, 0, 0], done
    assert all('"status": "completed"' in out for _, out, _ in done), done
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()
    store = SQLiteCheckpointer(path)
    for i in range(3):
        assert last_row(store, f"w{i}").state_snapshot["chunk"] == chunk_text(2000)
    store.close()


def test_inline_checkpoints_start_no_thread(tmp_path):
    path = tmp_path / "t.db"
    store = SQLiteCheckpointer(path, wal_checkpoint="inline", wal_checkpoint_pages=100)
    assert chunks_chain(store, steps=300).run({}).status == "completed"
    assert store._wal is None and not _threads()
    assert _wal_frames(path) < 100 + 50  # SQLite's own auto-checkpoint at 100 pages
    store.close()


def test_close_stops_the_thread_and_use_after_close_restarts_it(tmp_path):
    store = SQLiteCheckpointer(tmp_path / "t.db", wal_checkpoint_pages=50)
    assert chunks_chain(store, steps=100).run({}).status == "completed"
    assert store._wal is not None and store._wal.running and len(_threads()) == 1
    store.close()
    assert not store._wal.running and not _threads()
    assert chunks_chain(store, steps=100).run({}).status == "completed"
    assert len(_threads()) == 1
    store.close()
    assert not _threads()


def test_a_dropped_store_ends_its_thread(tmp_path):
    store = SQLiteCheckpointer(tmp_path / "t.db", wal_checkpoint_pages=50)
    assert chunks_chain(store, steps=100).run({}).status == "completed"
    assert len(_threads()) == 1
    del store
    import gc

    gc.collect()
    wait_for(lambda: not _threads(), "the thread of a garbage-collected store to end")


def test_a_store_used_from_a_forked_child_still_works(tmp_path):
    path = tmp_path / "t.db"
    store = SQLiteCheckpointer(path, wal_checkpoint_pages=50)
    assert chunks_chain(store, steps=100).run({}, execution_id="parent").status == "completed"
    assert store._wal is not None and store._wal.running
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            wal = store._wal
            fresh = not wal.running and not _threads()
            result = chunks_chain(store, steps=200).run({}, execution_id="child")
            out = {
                "fresh": fresh,
                "status": result.status,
                "checkpoints": wal.checkpoints,
                "threads": len(_threads()),
            }
            store.close()
            out["after_close"] = len(_threads())
            os.write(write, json.dumps(out).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        out = json.loads(pipe.read() or "{}")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert out["fresh"] and out["status"] == "completed"
    assert out["checkpoints"] >= 1 and out["threads"] == 1 and out["after_close"] == 0
    # The parent's store and thread are untouched and see the child's run.
    assert store._wal.running
    assert last_row(store, "child").state_snapshot["i"] == 200
    assert chunks_chain(store, steps=100).run({}, execution_id="parent-2").status == "completed"
    store.close()


def test_fork_waits_while_a_checkpoint_thread_is_inside_sqlite():
    """The fork hook: a child must not inherit SQLite's process-wide locks half-held by a
    checkpoint thread, so ``os.fork()`` waits until the thread is out of SQLite."""
    from tether.store import _sqlite_wal

    forked_at: list[float] = []

    def fork() -> None:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os._exit(0)
        forked_at.append(time.monotonic())
        os.waitpid(pid, 0)

    _sqlite_wal._IN_SQLITE.acquire()  # as a checkpoint thread does around each SQLite call
    forker = threading.Thread(target=fork)
    try:
        forker.start()
        time.sleep(0.3)
        assert forked_at == []  # the fork is waiting
    finally:
        released = time.monotonic()
        _sqlite_wal._IN_SQLITE.release()
    forker.join(10)
    assert len(forked_at) == 1 and forked_at[0] >= released


def test_data_is_intact_after_sigkill_mid_run(tmp_path):
    """A child running 2,000 steps (background checkpoints every ~250) is SIGKILLed after its
    1,500th step committed; every committed step is there and the run resumes to the end."""
    path = tmp_path / "t.db"
    url = f"sqlite:///{path}"
    SQLiteCheckpointer(path).close()
    code, _ = run_child([url, "chunks", "run", "killed", "{}"], fault="chain.after_commit@1500")
    assert code == -signal.SIGKILL
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = SQLiteCheckpointer(path)
    last = last_row(store, "killed")
    assert last.state_snapshot == {"i": 1500, "chunk": chunk_text(1500)}
    assert len(store.list("killed")) == 1500
    store.close()
    code, out = run_child([url, "chunks", "resume", "killed"])
    assert code == 0 and out is not None and out["status"] == "completed", out
    store = SQLiteCheckpointer(path)
    assert last_row(store, "killed").state_snapshot["i"] == 2000
    store.close()
