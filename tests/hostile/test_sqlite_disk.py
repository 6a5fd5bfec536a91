"""SQLite files on hostile disks: a read-only filesystem, a disk that fills up mid-write, a
truncated file, a file that is not a database. Real mounts where the test runs as root (a
tmpfs with ``size=``, remounted ``ro``); otherwise file permissions stand in for the read-only
mount, and the disk-full test skips saying why."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.results import run_of
from tether import Chain
from tether.errors import CorruptRecordError, StoreError, StoreUnavailableError
from tether.store.sqlite import SQLiteCheckpointer

IS_ROOT = os.geteuid() == 0


def _mount(target: Path, options: str) -> str | None:
    """Mount a tmpfs at ``target``; returns why not, or None."""
    target.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
        capture_output=True,
        text=True,
    )
    return None if proc.returncode == 0 else (proc.stderr.strip() or "mount failed")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs (root only)."""
    if not IS_ROOT:
        pytest.skip("needs root to mount a size-capped tmpfs")
    where = tmp_path / "disk"
    reason = _mount(where, "size=4m")
    if reason:
        pytest.skip(f"cannot mount a tmpfs here: {reason}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def growing_chain(store: Any, steps: int = 40, chunk: int = 16 * 1024) -> Chain:
    """``steps`` nodes in a row, each adding ``chunk`` bytes of fresh state."""
    chain = Chain("grow", store)

    def fresh_bytes(key: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return lambda s: {key: os.urandom(chunk // 2).hex()}

    for i in range(steps):
        chain.add_node(f"s{i}", fresh_bytes(f"k{i}"))
        if i:
            chain.add_edge(f"s{i - 1}", f"s{i}")
    return chain


def test_disk_full_mid_run_is_a_store_error_commits_nothing_half_and_resumes_once_freed(
    small_disk: Path,
) -> None:
    db = small_disk / "tether.db"
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (3584 * 1024))  # leave less than the run needs (compressed)
    store = SQLiteCheckpointer(db)
    chain = growing_chain(store)
    with pytest.raises(StoreError) as info:
        chain.run({}, execution_id="full")
    assert isinstance(info.value, StoreUnavailableError)
    assert "full" in str(info.value)

    # What committed is whole: consecutive rows, each with the state of every node before it.
    rows = store.list("full")
    assert rows and [r.seq for r in rows] == list(range(1, len(rows) + 1))
    for row in rows:
        index = int(row.node_id[1:])
        assert sorted(row.state_snapshot) == sorted(f"k{i}" for i in range(index + 1))
    assert run_of(store, "full").status == "running"
    committed = len(rows)
    assert 0 < committed < 40

    filler.unlink()  # space is freed; another process resumes
    reader = SQLiteCheckpointer(db)
    done = growing_chain(reader).resume("full")
    assert done.status == "completed" and len(done.output) == 40
    rows = reader.list("full")
    assert len(rows) == 41 and rows[committed - 1].node_id == f"s{committed - 1}"
    assert run_of(store, "full").status == "completed"
    reader.close()
    store.close()


def test_disk_full_before_the_first_row_leaves_no_run_behind_or_a_resumable_one(
    small_disk: Path,
) -> None:
    db = small_disk / "tether.db"
    store = SQLiteCheckpointer(db)  # the schema fits
    filler = small_disk / "filler"
    try:
        with open(filler, "wb") as f:  # fill the rest of the disk
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass
    chain = growing_chain(store, steps=2)
    with pytest.raises(StoreError):
        chain.run({}, execution_id="early")
    filler.unlink()
    run = store.get_run("early")
    if run is not None:  # the run row fit but no step did: it restarts from its input
        assert growing_chain(store, steps=2).resume("early").status == "completed"
    else:
        assert growing_chain(store, steps=2).run({}, execution_id="early").status == "completed"
    store.close()


@pytest.fixture
def read_only_db(tmp_path: Path) -> Iterator[Path]:
    """A database with one finished run, on a read-only filesystem (root: a tmpfs remounted
    ``ro``; otherwise a 0444 file in a 0555 directory)."""
    if IS_ROOT:
        where = tmp_path / "ro"
        reason = _mount(where, "size=8m")
        if reason:
            pytest.skip(f"cannot mount a tmpfs here: {reason}")
    else:  # pragma: no cover - CI runs as root here
        where = tmp_path / "ro"
        where.mkdir()
    db = where / "tether.db"
    store = SQLiteCheckpointer(db)
    chain = Chain("c", store)
    chain.add_node("a", lambda s: {"a": 1})
    chain.run({}, execution_id="done")
    store.close()
    if IS_ROOT:
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
    else:  # pragma: no cover
        os.chmod(db, 0o444)
        os.chmod(where, 0o555)
    yield db
    if IS_ROOT:
        subprocess.run(["umount", "-l", str(where)], check=False)
    else:  # pragma: no cover
        os.chmod(where, 0o755)


def test_a_database_on_a_read_only_filesystem_is_refused_clearly_and_left_intact(
    read_only_db: Path,
) -> None:
    before = read_only_db.read_bytes()
    with pytest.raises(StoreUnavailableError, match="cannot be written"):
        SQLiteCheckpointer(read_only_db)
    assert read_only_db.read_bytes() == before


def test_a_database_on_a_read_only_filesystem_is_read_with_read_only_and_left_intact(
    read_only_db: Path,
) -> None:
    before = read_only_db.read_bytes()
    store = SQLiteCheckpointer(read_only_db, read_only=True)
    assert run_of(store, "done").status == "completed"
    assert "a" in [c.node_id for c in store.list("done")]
    assert [r.execution_id for r in store.list_runs()] == ["done"]
    with pytest.raises(StoreUnavailableError, match="opened read-only"):
        store.delete_run("done")
    store.close()
    assert read_only_db.read_bytes() == before
    assert sorted(p.name for p in read_only_db.parent.iterdir()) == ["tether.db"]


def test_a_truncated_database_is_a_store_error_and_the_bytes_are_left_alone(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    store = SQLiteCheckpointer(db)
    chain = growing_chain(store, steps=8, chunk=8 * 1024)
    chain.run({}, execution_id="r")
    store.close()
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError):
        SQLiteCheckpointer(db).list("r")
    assert db.read_bytes() == data[: len(data) // 2]


def test_a_file_that_is_not_a_database_is_refused_and_not_overwritten(tmp_path: Path) -> None:
    db = tmp_path / "notes.txt"
    db.write_text("my notes, not a database\n" * 50)
    with pytest.raises(CorruptRecordError, match="not a readable tether SQLite database"):
        SQLiteCheckpointer(db)
    assert db.read_text() == "my notes, not a database\n" * 50
