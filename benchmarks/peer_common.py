"""What the peer workers share (run by ``benchmarks/.peers-venv/bin/python``, beside them as a
plain module: it never imports tether or the ``benchmarks`` package)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def each_backend(
    sqlite_backend: Callable[[str, str, int], dict[str, Any]],
    postgres_backend: Callable[[str, int], dict[str, Any]],
    reps: int,
    tmp: str,
    dsn: str,
) -> dict[str, Any]:
    """Run a peer on SQLite NORMAL, SQLite FULL and Postgres.

    Args:
        sqlite_backend: ``(tmp, synchronous, reps)`` -> that backend's metrics.
        postgres_backend: ``(dsn, reps)`` -> that backend's metrics.

    Returns:
        Backend name -> its metrics (name -> values), or ``{"skipped": reason}`` when it raised:
        a backend that fails is reported (the parent prints the reason), never hidden.
    """
    results: dict[str, Any] = {}
    runs: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        *(
            (f"SQLite {sync}", lambda sync=sync: sqlite_backend(tmp, sync, reps))
            for sync in ("NORMAL", "FULL")
        ),
        ("Postgres", lambda: postgres_backend(dsn, reps)),
    ]
    for name, run in runs:
        try:
            results[name] = run()
        except Exception as exc:
            results[name] = {"skipped": f"{type(exc).__name__}: {exc}"}
    return results
