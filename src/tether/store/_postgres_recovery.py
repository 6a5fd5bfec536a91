"""How the Postgres checkpointer's pools get past dead connections and outages at once.

psycopg_pool waits between tries, doubling the wait each time (1, 2, 4, 8... s), in two
places, and both cost a user's next operation seconds after the server was fine again:

- **Dead connections.** A connection that fails the checkout check is discarded and the next
  one tried after such a wait: when the server killed six idle connections (its idle timeout,
  a restart, a pooler), the next operation waited 0 + 1 + 2 + 4 + 8 s, or failed with
  ``StoreUnavailableError`` under a shorter timeout. But connections die together, so the
  first one found dead has the pool check every idle one (``pool.check()``, a round trip
  each, only then): the dead go at once, replacements start connecting, and the checkout's
  next try comes without a wait.
- **Reconnecting.** A failed connect is retried with the same doubling waits for
  ``reconnect_timeout`` (5 min by default): after an outage of a minute the server could be
  back for half a minute before the pool tried it, and operations meanwhile failed. Here a
  failed connect is tried once more at once and then given up (``reconnect_timeout=0``), and
  while an operation waits for a connection (or for the pool to open) the pool grows again
  after :data:`RETRY_CONNECT_SECONDS`: an operation waiting through an outage gets a
  connection that soon after the server is back, the first one after the outage starts a
  connect at once (none is pending), and a pool nobody waits on does not knock on a server
  that is down.

A checkout is cheap when nothing died: the check costs a round trip only when the idle
connection's socket has something to read (the server spoke unprompted, which on a connection
we never ``LISTEN`` on almost always means it was terminated).

Connecting without back-off would also log without back-off: psycopg_pool warns on every failed
connect, about a dozen lines a second for each operation waiting through an outage. So
:class:`OutageLogFilter` keeps, of our pools' warnings (pools named ``tether-…``), the first
failed connect of an outage and one every :data:`OUTAGE_LOG_EVERY_SECONDS` with the count left
out, drops "reconnection attempt … failed after 0 sec" (giving up at once is this design, and
the retry follows), and the first connection after the outage logs, at INFO on
``tether.store.postgres``, how long the outage lasted and how many connects failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import select
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

RETRY_CONNECT_SECONDS: Final = 0.25
"""The pause between rounds of connecting while an operation waits for a connection to a
server that refuses them."""

OUTAGE_LOG_EVERY_SECONDS: Final = 30.0
"""During an outage, at most one failed-connect warning of a pool is logged per this many
seconds; the lines left out are counted in the next one."""

_log = logging.getLogger("tether.store.postgres")

_POOL_PREFIX: Final = "tether-"
_CONNECT_FAILED: Final = "error connecting in %r: %s"
_GAVE_UP: Final = "reconnection attempt in pool %r failed after %s sec"


@dataclasses.dataclass
class _Outage:
    started: float  # monotonic seconds of the first failed connect
    logged: float  # monotonic seconds of the last warning let through
    failures: int = 1  # failed connects since it started
    left_out: int = 0  # warnings dropped since the last one let through


class OutageLogFilter(logging.Filter):
    """Thins psycopg_pool's connect warnings for tether's pools (see the module docstring).

    Installed once on the ``psycopg.pool`` logger; records of other pools pass untouched.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._outages: dict[str, _Outage] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not (
            record.msg in (_CONNECT_FAILED, _GAVE_UP)
            and isinstance(args, tuple)
            and args
            and isinstance(args[0], str)
            and args[0].startswith(_POOL_PREFIX)
        ):
            return True
        if record.msg == _GAVE_UP:
            return False
        now = time.monotonic()
        with self._lock:
            outage = self._outages.get(args[0])
            if outage is None:
                self._outages[args[0]] = _Outage(started=now, logged=now)
                return True
            outage.failures += 1
            if now - outage.logged < OUTAGE_LOG_EVERY_SECONDS:
                outage.left_out += 1
                return False
            left_out, outage.left_out, outage.logged = outage.left_out, 0, now
        record.msg = f"{_CONNECT_FAILED} (still failing; {left_out} like it not logged)"
        return True

    def connected(self, pool_name: str) -> None:
        """A connection of ``pool_name`` was made: an outage it logged, if any, is over."""
        if not self._outages:  # the common case: one dict check per new connection
            return
        with self._lock:
            outage = self._outages.pop(pool_name, None)
        if outage is not None:
            _log.info(
                "connected again in %r after %.1f s and %d failed connects",
                pool_name,
                time.monotonic() - outage.started,
                outage.failures,
            )


OUTAGE_LOG = OutageLogFilter()
logging.getLogger("psycopg.pool").addFilter(OUTAGE_LOG)


def _idle_socket_readable(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """True when an idle connection's socket has data (or EOF) waiting."""
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    except (OSError, ValueError, AttributeError, psycopg.Error):
        return True  # cannot tell: let the round-trip check decide


def _suspect(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    return conn.closed or _idle_socket_readable(conn)


class _Recovery:
    """What the pool callbacks share: whether an operation wants a connection."""

    def __init__(self) -> None:
        self.opening = True  # the pool is being opened: its opener waits for it
        self.waiting = 0  # operations waiting for a checkout

    def wanted(self, pool: ConnectionPool[Any] | AsyncConnectionPool[Any]) -> bool:
        """An operation waits for a connection of ``pool``, or for it to open."""
        return not pool.closed and (self.opening or self.waiting > 0)


class SyncRecovery(_Recovery):
    """The callbacks and checkout of a sync pool (see the module docstring).

    Pass :meth:`check` and :meth:`reconnect_failed` to the pool with ``reconnect_timeout=0``,
    set :attr:`pool`, and check connections out with :meth:`connection`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.pool: ConnectionPool[Any] | None = None
        self._lock = threading.Lock()

    def configure(self, conn: psycopg.Connection[Any]) -> None:
        """Pool ``configure`` callback: a new connection ends an outage's log."""
        if self.pool is not None:
            OUTAGE_LOG.connected(self.pool.name)

    def check(self, conn: psycopg.Connection[Any]) -> None:
        """Pool ``check`` callback: raise if ``conn`` is dead, and then sweep the idle ones."""
        if not _suspect(conn):
            return
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            if self.pool is not None:
                self.pool.check()
            raise

    def reconnect_failed(self, pool: ConnectionPool[Any]) -> None:
        """Pool ``reconnect_failed`` callback: connect again soon if someone waits."""
        if self.wanted(pool):
            timer = threading.Timer(RETRY_CONNECT_SECONDS, self._grow, (pool,))
            timer.daemon = True
            timer.start()

    def _grow(self, pool: ConnectionPool[Any]) -> None:
        if not self.wanted(pool):
            return
        try:
            pool.check()  # no idle connection while someone waits: it only grows the pool
        except Exception:  # a pool closing under us: nobody waits any more
            _log.debug("could not restart connecting in %s", pool.name, exc_info=True)

    @contextlib.contextmanager
    def connection(self, pool: ConnectionPool[Any]) -> Iterator[psycopg.Connection[Any]]:
        """``pool.connection()``, counting the caller as waiting until it has one."""
        with self._lock:
            self.waiting += 1
        try:
            conn = pool.getconn()
        finally:
            with self._lock:
                self.waiting -= 1
        try:
            with conn:
                yield conn
        finally:
            pool.putconn(conn)


class AsyncRecovery(_Recovery):
    """As :class:`SyncRecovery`, for an async pool (used on its event loop only)."""

    def __init__(self) -> None:
        super().__init__()
        self.pool: AsyncConnectionPool[Any] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """As :meth:`SyncRecovery.configure`."""
        if self.pool is not None:
            OUTAGE_LOG.connected(self.pool.name)

    async def check(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """As :meth:`SyncRecovery.check`."""
        if not _suspect(conn):
            return
        try:
            await AsyncConnectionPool.check_connection(conn)
        except Exception:
            if self.pool is not None:
                await self.pool.check()
            raise

    async def reconnect_failed(self, pool: AsyncConnectionPool[Any]) -> None:
        """As :meth:`SyncRecovery.reconnect_failed`."""
        if self.wanted(pool):
            asyncio.get_running_loop().call_later(RETRY_CONNECT_SECONDS, self._spawn, pool)

    def _spawn(self, pool: AsyncConnectionPool[Any]) -> None:
        task = asyncio.ensure_future(self._grow(pool))
        self._tasks.add(task)  # held until done: the loop keeps only a weak reference
        task.add_done_callback(self._tasks.discard)

    async def _grow(self, pool: AsyncConnectionPool[Any]) -> None:
        if not self.wanted(pool):
            return
        try:
            await pool.check()
        except Exception:
            _log.debug("could not restart connecting in %s", pool.name, exc_info=True)

    @contextlib.asynccontextmanager
    async def connection(
        self, pool: AsyncConnectionPool[Any]
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """As :meth:`SyncRecovery.connection`."""
        self.waiting += 1
        try:
            conn = await pool.getconn()
        finally:
            self.waiting -= 1
        try:
            async with conn:
                yield conn
        finally:
            await pool.putconn(conn)
