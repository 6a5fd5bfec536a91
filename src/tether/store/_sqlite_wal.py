"""WAL checkpoints for the SQLite store on a background thread, off the step path.

SQLite's own auto-checkpoint runs inside the COMMIT of whichever write takes the WAL past
``wal_autocheckpoint`` pages, so that step pays for copying the WAL back into the database
file (and, under ``synchronous=NORMAL``, for the two syncs around the copy). Here each store
owns one daemon thread with its own connection that runs ``PRAGMA wal_checkpoint(PASSIVE)``
when the WAL has grown by about ``pages`` pages. A PASSIVE checkpoint takes no lock that a
reader or a writer waits for. The writers' part is one counter increment and one comparison
per commit; every ``every`` commits one of them sets an event.

Writers do not know how many pages a commit wrote (Python's ``sqlite3`` has no WAL hook), so
the thread estimates the frames per commit from the WAL's frames and the commits since its
previous look, keeping a slowly decaying maximum: a sample taken across a WAL restart
undercounts, and an estimate too high only wakes the thread sooner. Frames other processes
wrote count too, which also errs towards sooner. On each wake-up the thread first looks at the
size of the ``-wal`` file (``os.stat``: the file is never opened, see :func:`_wal_frames_at_most`).
The file keeps its largest size when the WAL starts over, so its size in frames bounds the
frames the WAL holds: below ``pages`` the thread only re-estimates and asks to be woken when
the WAL should reach ``pages``, so a first guess that is too high does not checkpoint a WAL
far short of ``pages``. Once the file has reached ``pages`` frames the bound says nothing and
the estimate alone decides, as measured from each checkpoint's frame count.

A PASSIVE checkpoint copies the frames present when it starts. The WAL file starts over from
its beginning only when a writer begins while every frame is copied: under any pause between
commits longer than a checkpoint, that happens after each background checkpoint. Under
back-to-back commits a commit lands during every checkpoint, so the WAL would keep growing
(and a checkpoint always in progress would also keep SQLite's inline auto-checkpoint from
running: it gives up when another checkpoint holds the lock). So when a checkpoint finds the
WAL past ``2 * pages`` frames (it did not start over since the previous one), the thread
copies the frames written meanwhile in a second PASSIVE checkpoint while holding ``gate``, a
lock this store's writers take around each write transaction: that short tail (a few pages
and the two syncs) is all a step can wait for, and the next commit starts the WAL over. The
connections' own auto-checkpoint, at ``SAFETY_NET_FACTOR * pages``, bounds the WAL if the
thread is dead, stuck or losing to other processes' writers.

The thread is started on the first signal, not when the store opens (a read-only user never
starts one); it does not survive ``fork()``, so a child starts its own on its first signal.
It stops on :meth:`WalCheckpointer.stop`, when the store is garbage-collected, and at
interpreter exit. An error in it is logged once and the thread carries on with a new
connection on the next signal: the auto-checkpoint safety net still bounds the WAL.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sqlite3
import threading
import weakref
from typing import Final

__all__ = ["SAFETY_NET_FACTOR", "WalCheckpointer"]

_LOG = logging.getLogger("tether.store.sqlite")

# The connections' wal_autocheckpoint under background checkpoints, in multiples of the
# background threshold: the WAL's size bound (in pages) when the thread cannot keep up.
SAFETY_NET_FACTOR: Final = 4

_CHECKPOINT: Final = "PRAGMA wal_checkpoint(PASSIVE)"
# The WAL file: a 32-byte header, then frames of a 24-byte header and one page (SQLite's
# "Database File Format", section 4.1).
_WAL_HEADER: Final = 32
_FRAME_HEADER: Final = 24

_LIVE: weakref.WeakSet[WalCheckpointer] = weakref.WeakSet()

# Held by the checkpoint threads around each call into SQLite, and by a thread calling fork()
# until the fork is done: a child forked while a thread of its parent was inside SQLite inherits
# SQLite's process-wide locks held by a thread it does not have, and its first connection to
# the file can hang or wait out the busy timeout. Stores' threads checkpoint one at a time.
_IN_SQLITE: Final = threading.Lock()


class WalCheckpointer:
    """One store's background checkpoint thread (started lazily) and the writers' counter.

    Args:
        path: the database file.
        pages: WAL growth, in pages, after which the thread checkpoints.
        synchronous: the store's ``synchronous`` setting, used by the thread's connection
            (a checkpoint syncs the WAL before copying and the database file after, under
            both ``NORMAL`` and ``FULL``).
    """

    def __init__(self, path: str, pages: int, synchronous: str) -> None:
        self.path = path
        self.pages = pages
        self.synchronous = synchronous
        # Written by writer threads without a lock: a lost increment only delays a signal.
        self.total = 0  # commits by this store in this process
        self.frames_per_commit = 4.0  # first guess; re-estimated by the thread
        self.every = max(1, int(pages / self.frames_per_commit))  # commits per signal
        self.next_at = self.every
        # Diagnostics, written by the thread.
        self.checkpoints = 0  # PASSIVE checkpoints completed
        self.errors = 0
        self.tails = 0  # second checkpoints under the gate
        self.deferred = 0  # wake-ups that found the WAL under ``pages`` frames
        self.last_result: tuple[int, int, int] | None = None  # (busy, WAL frames, copied)
        self._last_total = 0
        self._last_frames = 0
        self._reset_after_fork()
        _LIVE.add(self)

    def _reset_after_fork(self) -> None:
        # A forked child has no thread, and the parent's lock may have been held mid-fork.
        self._lock = threading.Lock()
        # Writers hold it around each write transaction, taken before SQLite's write lock;
        # re-entrant in case a write runs inside another. See the module doc.
        self.gate = threading.RLock()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._pid = os.getpid()

    def committed(self) -> None:
        """Count one of this store's commits; once the count reaches ``next_at`` (set by the
        thread: about ``every`` commits on), wake the thread. A writer's whole part, outside
        any lock."""
        self.total += 1
        if self.total >= self.next_at:
            self.signal()

    def signal(self) -> None:
        """Wake the thread (starting it if needed). Writers call this once ``total`` reaches
        ``next_at``, which only the thread moves (so a writer's late write cannot undo it):
        until the thread runs, each commit signals again."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                if self._pid != os.getpid():  # pragma: no cover - the fork hook resets first
                    self._reset_after_fork()
                self._wake, self._halt = threading.Event(), threading.Event()
                thread = threading.Thread(
                    target=_run,
                    args=(weakref.ref(self), self._wake, self._halt, self.path, self.synchronous),
                    name="tether-sqlite-wal-checkpoint",
                    daemon=True,
                )
                thread.start()
                self._thread = thread
                weakref.finalize(self, _halt, self._wake, self._halt)
            wake = self._wake
        wake.set()

    @property
    def running(self) -> bool:
        """Whether this process has a live checkpoint thread for the store."""
        thread = self._thread
        return thread is not None and thread.is_alive() and self._pid == os.getpid()

    def stop(self) -> None:
        """Stop the thread and wait for it (at most one checkpoint in progress) to end."""
        with self._lock:
            thread, self._thread = self._thread, None
            _halt(self._wake, self._halt)
        if (
            thread is not None
            and self._pid == os.getpid()
            and thread is not threading.current_thread()
        ):
            thread.join()

    def _checkpointed(self, total: int, result: tuple[int, int, int]) -> None:
        """Record a checkpoint's result and re-estimate the commits per signal."""
        self.checkpoints += 1
        self.last_result = result
        self._observe(total, result[1])
        self.next_at = total + self.every

    def _deferred(self, total: int, frames: int) -> None:
        """Record a wake-up that found ``frames`` (< ``pages``) in the WAL: re-estimate and
        ask for the next one when the WAL should hold ``pages`` frames."""
        self.deferred += 1
        self._observe(total, frames)
        left = int((self.pages - frames) / self.frames_per_commit)
        self.next_at = total + max(1, left)

    def _observe(self, total: int, frames: int) -> None:
        """Re-estimate the frames per commit from the WAL's ``frames`` after ``total``
        commits."""
        grown = frames - self._last_frames if frames >= self._last_frames else frames
        commits = total - self._last_total
        self._last_frames, self._last_total = frames, total
        if grown > 0 and commits > 0:
            self.frames_per_commit = max(grown / commits, 0.9 * self.frames_per_commit)
            self.every = max(1, min(self.pages, int(self.pages / self.frames_per_commit)))


def _halt(wake: threading.Event, halt: threading.Event) -> None:
    halt.set()
    wake.set()


def _run(
    ref: weakref.ref[WalCheckpointer],
    wake: threading.Event,
    halt: threading.Event,
    path: str,
    synchronous: str,
) -> None:
    """The thread: one PASSIVE checkpoint per wake-up that finds the WAL at ``pages`` frames
    or more, until halted or the owner is gone."""
    conn: sqlite3.Connection | None = None
    frame_bytes = 0  # a WAL frame: the page size plus the frame header
    try:
        while True:
            wake.wait()
            wake.clear()
            owner = ref()
            if owner is None or halt.is_set():
                return
            try:
                total = owner.total
                owner.next_at = total + owner.every  # the writers stop signalling
                with _IN_SQLITE:
                    if conn is None:
                        conn = sqlite3.connect(path, timeout=1.0, isolation_level=None)
                        conn.execute(f"PRAGMA synchronous = {synchronous}")
                        frame_bytes = conn.execute("PRAGMA page_size").fetchone()[0] + _FRAME_HEADER
                frames = _wal_frames_at_most(f"{path}-wal", frame_bytes)
                if frames is not None and frames < owner.pages:
                    owner._deferred(total, frames)
                    del owner
                    continue
                with _IN_SQLITE:
                    busy, frames, copied = conn.execute(_CHECKPOINT).fetchall()[0]
                    if frames >= 2 * owner.pages:  # the WAL did not start over: copy the tail
                        with owner.gate:
                            busy, frames, copied = conn.execute(_CHECKPOINT).fetchall()[0]
                        owner.tails += 1
                owner._checkpointed(total, (int(busy), int(frames), int(copied)))
            except Exception as exc:  # never the user's problem: the safety net bounds the WAL
                owner.errors += 1
                if owner.errors == 1:
                    _LOG.warning(
                        "background WAL checkpoint of %r failed (%s: %s); SQLite's "
                        "auto-checkpoint still bounds the WAL",
                        path,
                        type(exc).__name__,
                        exc,
                    )
                if conn is not None:
                    _close_quietly(conn)
                    conn = None
            del owner
    finally:
        if conn is not None:
            _close_quietly(conn)


def _wal_frames_at_most(wal: str, frame_bytes: int) -> int | None:
    """The most frames the WAL can hold now: its file's size in frames (the file keeps its
    largest size when the WAL starts over); ``None`` when it cannot be stat'ed. Never opens the
    file: closing a descriptor drops every POSIX lock this process holds on it, SQLite's own
    included (SQLite's "How To Corrupt An SQLite Database File", section 2.2)."""
    try:
        size = os.stat(wal).st_size
    except OSError:
        return None
    return max(0, size - _WAL_HEADER) // frame_bytes


def _close_quietly(conn: sqlite3.Connection) -> None:
    with _IN_SQLITE, contextlib.suppress(Exception):  # closing a broken connection
        conn.close()


def _after_fork_in_child() -> None:
    _IN_SQLITE.release()  # taken by the forking thread, which is this child's only thread
    for ckpt in list(_LIVE):
        ckpt._reset_after_fork()


def _stop_all_at_exit() -> None:
    for ckpt in list(_LIVE):
        ckpt.stop()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_IN_SQLITE.acquire,
        after_in_parent=_IN_SQLITE.release,
        after_in_child=_after_fork_in_child,
    )
atexit.register(_stop_all_at_exit)
