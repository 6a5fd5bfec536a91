"""``tether worker`` and ``tether enqueue``: continue crashed runs, start queued ones
(``docs/workers.md``)."""

from __future__ import annotations

import json
import logging
import signal
import threading

import click

from ..registry import Registry
from ..serde import parse_json_text
from ..store.base import Checkpointer
from ..views import runner_filter
from . import _errors
from ._app import app_option, db_option, display_url, open_app, open_store, store_options
from ._render import err, out


@click.command("worker")
@db_option
@app_option(required=True)
@click.option("--concurrency", type=click.IntRange(1), default=4, show_default=True)
@click.option(
    "--lease-seconds",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="A run whose worker stops renewing is taken over about this long afterwards.",
)
@click.option("--poll-interval", type=click.FloatRange(min=0.0), default=0.5, show_default=True)
@click.option(
    "--max-attempts",
    type=click.IntRange(1),
    default=5,
    show_default=True,
    help="Claims of one run without a clean finish before it is marked failed.",
)
@click.option(
    "--limit",
    "limits",
    multiple=True,
    metavar="NAME=N",
    help="At most N runs of runner NAME at once in this worker (repeatable).",
)
@click.option(
    "--versions",
    metavar="V1,V2",
    default=None,
    help="Serve only runs started by these versions of the code (and runs with no version); "
    "default: the app's Registry(version=..., compatible_versions=...), or every run.",
)
def worker(
    db_url: str,
    app_spec: str,
    concurrency: int,
    lease_seconds: float,
    poll_interval: float,
    max_attempts: int,
    limits: tuple[str, ...],
    versions: str | None,
) -> int:
    """Claim and run the store's unowned work until SIGTERM or Ctrl-C: queued runs, runs whose
    process died (lease lapsed), and answered interrupts."""
    from ..worker_process import run_worker

    per_runner: dict[str, int] = {}
    for item in limits:
        name, sep, n = item.partition("=")
        if not sep or not name or not n.isdigit():
            raise _errors.CommandError(f"--limit takes NAME=N, got {item!r}", _errors.BAD_INPUT)
        per_runner[name] = int(n)
    served = None if versions is None else [v.strip() for v in versions.split(",") if v.strip()]
    if served == []:
        raise _errors.CommandError("--versions takes V1,V2,..., got none", _errors.BAD_INPUT)
    # The store first: an app that opens tether.connect() on import would create a mistyped one.
    store = open_store(db_url, migrate=True)
    registry = open_app(app_spec, db_url)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    err.print(
        f"tether: worker on {display_url(db_url)} for {', '.join(registry.names())} "
        f"(concurrency {concurrency}, lease {lease_seconds:g}s, versions "
        f"{_versions_label(registry, served)})",
        markup=False,
        highlight=False,
    )
    try:
        stats = run_worker(
            registry,
            store,
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            poll_interval_seconds=poll_interval,
            max_attempts=max_attempts,
            stop=stop,
            per_runner_limit=per_runner,
            versions=served,
        )
    finally:
        store.close()
    err.print(
        f"tether: worker stopped: {stats.claimed} claimed, {stats.finished} finished, "
        f"{stats.lease_lost} lost to other workers, {stats.dead_lettered} dead-lettered",
        markup=False,
        highlight=False,
    )
    return _errors.OK


@click.command("enqueue")
@store_options
@app_option(required=False)
@click.argument("runner_name")
@click.argument("input_json", metavar="INPUT_JSON", default="null")
@click.option("--id", "execution_id", default=None, help="The run's execution_id (idempotent).")
@click.option("--priority", type=int, default=0, show_default=True, help="Higher starts first.")
def enqueue(
    db_url: str,
    as_json: bool,
    app_spec: str | None,
    runner_name: str,
    input_json: str,
    execution_id: str | None,
    priority: int,
) -> int:
    """Queue a run of RUNNER_NAME with INPUT_JSON for a worker to start; print its id.

    With --app (or $TETHER_APP), a RUNNER_NAME the app does not have is refused (no worker
    could start the run). Without it, a name no run in the store has used yet is queued with
    a warning that names the runners the store knows.
    """
    from ..worker_process import enqueue as do_enqueue

    runner_name = runner_filter(runner_name) or runner_name
    try:
        value = parse_json_text(input_json)
    except json.JSONDecodeError as exc:
        raise _errors.CommandError(f"INPUT_JSON is not JSON: {exc}", _errors.BAD_INPUT) from None
    if app_spec:
        known = open_app(app_spec, db_url).names()
        if runner_name not in known:
            raise _errors.CommandError(
                f"no runner named {runner_name!r} in {app_spec}: a worker could never start "
                f"the run. Runners: {', '.join(known) or 'none'}",
                _errors.BAD_INPUT,
            )
    store = open_store(db_url, create=True)
    try:
        if not app_spec:
            _warn_if_unseen(store, runner_name)
        eid = do_enqueue(store, runner_name, value, execution_id=execution_id, priority=priority)
    finally:
        store.close()
    if as_json:
        out.print_json(json.dumps({"execution_id": eid}))
    else:
        out.print(eid, markup=False, highlight=False)
    return _errors.OK


def _warn_if_unseen(store: Checkpointer, runner_name: str) -> None:
    if store.list_runs(runner_name=runner_name, limit=1):
        return
    seen = sorted({r.runner_name for r in store.list_runs(limit=1000)})
    err.print(
        f"tether: warning: no run of a runner named {runner_name!r} in this store yet "
        f"(runners seen: {', '.join(seen) or 'none'}); the run waits until a worker has it. "
        "Pass --app to check the name against your runners",
        markup=False,
        highlight=False,
    )


COMMANDS = (worker, enqueue)


def _versions_label(registry: Registry, served: list[str] | None) -> str:
    from ..worker_process import served_versions

    shown = served_versions(registry, served)
    return "all" if shown is None else ", ".join(shown) + " and unversioned"
