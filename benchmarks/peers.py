"""Peers: LangGraph and fastaiagent, each with its SQLite and Postgres checkpointers, on the
same workloads.

The peers live in their own venv, ``benchmarks/.peers-venv``, created here on first use when
the package registry answers, so that their dependencies never touch tether's. Each peer is
installed and checked on its own: one that cannot be installed or imported is reported as
skipped with the reason, and the other still runs. Each peer's workloads run as a child
process (:mod:`benchmarks.peer_worker` for LangGraph,
:mod:`benchmarks.peer_worker_fastaiagent` for fastaiagent; neither imports tether) and the
results are compared with ours as peer ÷ ours (above 1: the peer costs more).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .backends import PG_DSN, _bench_tmp
from .report import REPS, Section

VENV = Path(__file__).parent / ".peers-venv"
PEER_BACKENDS = ("SQLite NORMAL", "SQLite FULL", "Postgres")
RATIO_NOTE = (
    "median ÷ median: the peer ran after tether, not interleaved with it, so a ratio near 1 is "
    "within this machine's run-to-run noise"
)


@dataclass(frozen=True, slots=True)
class Peer:
    """A peer framework: what to install, how to tell it is usable, which worker runs it."""

    name: str
    packages: tuple[str, ...]  # pip requirement strings, installed together
    probe: str  # Python that imports everything the worker needs
    worker: str  # file beside this module (or a path), run by the venv's python

    @property
    def distribution(self) -> str:
        """The package whose presence on the registry decides whether to try installing."""
        return self.packages[0].split("[")[0]


PEERS = (
    Peer(
        "LangGraph",
        (
            "langgraph",
            "langgraph-checkpoint-sqlite",
            "langgraph-checkpoint-postgres",
            "psycopg[binary]",
            "psycopg-pool",
        ),
        "import langgraph.checkpoint.sqlite, langgraph.checkpoint.postgres",
        "peer_worker.py",
    ),
    Peer(
        "fastaiagent",
        # The [postgres] extra brings psycopg[binary,pool] for PostgresCheckpointer; the
        # SQLite checkpointer needs only the standard library.
        ("fastaiagent[postgres]",),
        "import fastaiagent, fastaiagent.checkpointers.postgres, psycopg, psycopg_pool",
        "peer_worker_fastaiagent.py",
    ),
)


def _python() -> Path:
    return VENV / "bin" / "python"


def _run(
    cmd: list[str], timeout_seconds: float, **kwargs: Any
) -> subprocess.CompletedProcess[str] | str:
    """Run ``cmd`` capturing text output; why it could not finish (it timed out, or could not
    start) instead of raising, so that a stuck registry or worker costs only its peer."""
    try:
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_seconds, check=False, **kwargs
        )
    except subprocess.TimeoutExpired:
        return f"{Path(cmd[0]).name} {' '.join(cmd[1:3])} did not finish in {timeout_seconds:g} s"
    except OSError as exc:
        return f"could not start {cmd[0]}: {exc}"


def _import_error(peer: Peer) -> str | None:
    """Why the venv cannot import ``peer`` (its last stderr line), or ``None`` if it can."""
    if not _python().exists():
        return "no venv"
    probe = _run([str(_python()), "-c", peer.probe], 120)
    if isinstance(probe, str):
        return probe
    return None if probe.returncode == 0 else _last_line(probe.stderr)


def _registry_error(peer: Peer) -> str | None:
    """Why the registry cannot serve ``peer``, or ``None`` if it can."""
    with tempfile.TemporaryDirectory() as tmp:
        # pip's own timeout per request, so that a registry that never answers fails here
        # and not on this call's limit.
        check = _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "-q",
                "--timeout",
                "20",
                "--retries",
                "1",
                "-d",
                tmp,
                peer.distribution,
            ],
            180,
        )
    if isinstance(check, str):
        return f"could not ask the registry for {peer.distribution} ({check})"
    if check.returncode != 0:
        return f"the registry does not serve {peer.distribution} ({_last_line(check.stderr)})"
    return None


def ensure_venv() -> dict[str, str | None]:
    """Create the peers' venv and install what it lacks, one peer at a time.

    Returns:
        Peer name -> the reason it cannot be used, or ``None`` when it imports.
    """
    reasons: dict[str, str | None] = {p.name: None for p in PEERS}
    missing = [p for p in PEERS if _import_error(p) is not None]
    for peer in missing:
        reason = _registry_error(peer)
        if reason is not None:
            reasons[peer.name] = reason
            continue
        if not _python().exists():
            print("peers: creating benchmarks/.peers-venv (one time) ...", flush=True)
            venv.create(VENV, with_pip=True, clear=True)
        print(f"peers: installing {peer.name} into benchmarks/.peers-venv ...", flush=True)
        install = _run([str(_python()), "-m", "pip", "install", "-q", *peer.packages], 900)
        if isinstance(install, str):
            reasons[peer.name] = f"pip install failed ({install})"
        elif install.returncode != 0:
            reasons[peer.name] = f"pip install failed ({_last_line(install.stderr)})"
    # Probe every peer again: one install can upgrade a dependency the other one needs.
    for peer in PEERS:
        if reasons[peer.name] is None:
            error = _import_error(peer)
            if error is not None:
                reasons[peer.name] = f"installed but does not import ({error})"
    return reasons


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def _worker_dsn() -> str:
    """The bench's Postgres DSN with a connect timeout, so that a server that never answers
    fails the peer's Postgres backend in seconds (as tether's own probe does) instead of
    hanging its worker."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    if "connect_timeout" in conninfo_to_dict(PG_DSN):
        return PG_DSN
    return make_conninfo(PG_DSN, connect_timeout=5)


def _run_worker(peer: Peer) -> dict[str, Any] | str:
    """The worker's JSON (backend -> metric -> values), or why it produced none.

    The worker runs as a copy beside a copy of :mod:`benchmarks.peer_common` in a directory
    of their own: Python puts a script's directory first on its import path, so run from
    ``benchmarks/`` a module there named as a peer's package (``benchmarks/langgraph.py`` was
    one) is imported instead of that package and every backend of the peer fails.
    """
    here = Path(__file__).parent
    with tempfile.TemporaryDirectory(dir=_bench_tmp()) as tmp:
        code = Path(tmp, "worker")
        code.mkdir()
        for source in (here / peer.worker, here / "peer_common.py"):
            shutil.copyfile(source, code / source.name)
        work = Path(tmp, "work")
        work.mkdir()
        proc = _run(
            [
                str(_python()),
                str(code / Path(peer.worker).name),
                str(REPS),
                str(work),
                _worker_dsn(),
            ],
            1800,
            cwd=work,  # fastaiagent writes a project file into its working directory
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )
    if isinstance(proc, str):
        return f"worker failed: {proc}"
    if proc.returncode != 0:
        return f"worker failed: {_last_line(proc.stderr)}"
    try:
        result = json.loads(_last_line(proc.stdout))
    except ValueError:
        return f"worker printed no JSON result (last line: {_last_line(proc.stdout)[:200]!r})"
    if not isinstance(result, dict):
        return f"worker printed {type(result).__name__}, not a JSON object"
    return result


def run_peers(ours: dict[str, dict[str, list[float]]]) -> list[Section]:
    """Run the peer workloads and compare with ``ours`` (backend -> metric -> values).

    ``ours`` uses the keys the peer workers report: ``w1_ms``, ``w1_cpu_ms``, ``w2_last_ms``,
    ``w2_row_bytes``, ``w2_file_bytes`` and, when W3 ran, ``w3_resume_ms`` (resume of a
    300-step run on a fresh checkpointer). A metric missing from ``ours`` (the
    workload did not run, as under ``TETHER_BENCH_ONLY=PEERS``) gets the peer's values and no
    ratio row.
    """
    reasons = ensure_venv()
    out: list[Section] = []
    for peer in PEERS:
        reason = reasons[peer.name]
        got = _run_worker(peer) if reason is None else reason
        if isinstance(got, str):
            out.append(Section("Peers", peer.name, skipped=got))
            continue
        for backend in PEER_BACKENDS:
            out.append(_section(peer.name, backend, got, ours.get(backend)))
    return out


def _section(
    peer: str, backend: str, got: dict[str, Any], mine: dict[str, list[float]] | None
) -> Section:
    """One peer on one backend: its numbers and peer ÷ ours for each one we also have."""
    s = Section("Peers", f"{peer} / {backend}")
    theirs = got.get(backend, {"skipped": "not run"})
    if "skipped" in theirs:
        s.skipped = theirs["skipped"]
        return s
    mine = mine or {}
    # The version and the settings checked by the worker, as a note on the section's first row.
    note = f"{peer} {got['version']}: {theirs['settings']}" if "version" in got else ""

    def pair(name: str, unit: str, key: str, ratio_name: str) -> None:
        if key not in theirs:
            return
        s.add(name, unit, theirs[key], note="" if s.metrics else note)
        if key in mine:
            # The peer ran in another process minutes after ours: its repetitions pair with
            # none of ours, so the ratio is of the medians (one value, no range).
            ratio = statistics.median(theirs[key]) / statistics.median(mine[key])
            s.add(ratio_name, "x", [ratio], note=RATIO_NOTE)

    pair("W1 wall / step", "ms", "w1_ms", "W1 wall: peer ÷ ours")
    pair("W1 client CPU / step", "ms", "w1_cpu_ms", "W1 CPU: peer ÷ ours")
    pair("W2 last 50 steps", "ms/step", "w2_last_ms", "W2 last50: peer ÷ ours")
    pair("W2 row bytes", "B", "w2_row_bytes", "W2 row bytes: peer ÷ ours")
    pair("W2 store bytes", "B", "w2_file_bytes", "W2 store bytes: peer ÷ ours")
    pair("W3 resume, 300-step run", "ms", "w3_resume_ms", "W3 resume: peer ÷ ours")
    return s
