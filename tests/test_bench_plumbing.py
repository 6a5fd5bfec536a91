"""The plumbing of ``make bench`` (not its numbers): the workload selection, the tables, and
the peer runner's failures turned into skip reasons instead of tracebacks."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import __main__ as bench
from benchmarks import peer_common, peers
from benchmarks.report import REPS, Section, render


def test_only_names_workloads_in_any_case_and_spacing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_BENCH_ONLY", " w1 , Peers,")
    assert bench._selection() == {"W1", "PEERS"}
    monkeypatch.delenv("TETHER_BENCH_ONLY")
    assert bench._selection() == set()  # unset: everything


@pytest.mark.parametrize(("value", "says"), [(",", "empty"), (" ", "empty"), ("w9", "'W9'")])
def test_a_bad_only_is_refused_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str, says: str
) -> None:
    monkeypatch.setenv("TETHER_BENCH_ONLY", value)
    assert bench.main() == 2
    out, err = capsys.readouterr()
    assert out == ""  # no header printed, no backend probed
    names = [title.split(":")[0].upper() for title, _ in bench.WORKLOADS] + ["PEERS"]
    assert names[:5] == ["W1", "W2", "W3", "W4", "W5"] and "W6" in names
    assert says in err and ", ".join(names) in err


def test_a_skip_reason_stays_on_its_table_row() -> None:
    reason = "connection failed: port 1 | refused\n\tIs the server running on that host?"
    table = render("W1", [Section("W1", "Postgres", skipped=reason)])
    rows = [line for line in table.splitlines() if line.startswith("| Postgres")]
    assert rows == [
        "| Postgres | skipped: connection failed: port 1 \\| refused Is the server running on "
        "that host? | | | | | | |"
    ]


def test_a_peer_command_that_hangs_or_cannot_start_becomes_a_reason() -> None:
    hung = peers._run([sys.executable, "-c", "import time; time.sleep(30)"], 0.5)
    assert isinstance(hung, str) and "did not finish in 0.5 s" in hung
    missing = peers._run(["/nonexistent/python", "-c", "pass"], 5)
    assert isinstance(missing, str) and missing.startswith("could not start /nonexistent/python")
    ok = peers._run([sys.executable, "-c", "print('hi')"], 30)
    assert not isinstance(ok, str) and ok.stdout == "hi\n"


def test_peer_values_are_kept_without_ours_and_ratios_are_of_medians() -> None:
    got = {"version": "9.9", "Postgres": {"w1_ms": [1.0, 3.0, 2.0], "settings": "schema x"}}
    alone = peers._section("Peer", "Postgres", got, None)
    assert alone.skipped is None
    assert [(m.name, m.values) for m in alone.metrics] == [("W1 wall / step", [1.0, 3.0, 2.0])]
    paired = peers._section("Peer", "Postgres", got, {"w1_ms": [0.5, 0.25, 1.0]})
    ratio = paired.metrics[1]
    assert ratio.name == "W1 wall: peer ÷ ours" and ratio.values == [4.0]  # 2.0 ÷ 0.5
    skipped = peers._section("Peer", "SQLite FULL", got, None)
    assert skipped.skipped == "not run"


def test_peer_w2_steps_run_from_one_node_start_to_the_next() -> None:
    # 101 node starts 1 ms apart (the first 50 steps) then 2 ms apart: 100 steps in all.
    marks = [i * 0.001 for i in range(51)] + [0.05 + i * 0.002 for i in range(1, 51)]
    first, last = peer_common.first_last_ms(marks)
    assert first == pytest.approx(1.0) and last == pytest.approx(2.0)


def test_a_peer_backend_that_raises_is_reported_and_the_others_still_run() -> None:
    def sqlite(tmp: str, sync: str, reps: int) -> dict[str, Any]:
        if sync == "FULL":
            raise RuntimeError("asked for FULL, got NORMAL")
        return {"w1_ms": [float(reps)], "tmp": tmp}

    def postgres(dsn: str, reps: int) -> dict[str, Any]:
        return {"dsn": dsn}

    got = peer_common.each_backend(sqlite, postgres, 3, "/t", "host=x")
    assert got == {
        "SQLite NORMAL": {"w1_ms": [3.0], "tmp": "/t"},
        "SQLite FULL": {"skipped": "RuntimeError: asked for FULL, got NORMAL"},
        "Postgres": {"dsn": "host=x"},
    }


def test_a_peer_worker_imports_the_peers_packages_not_modules_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A module beside the worker named as a package the peer imports (benchmarks/langgraph.py
    # was one, with relative imports) shadowed that package when the worker ran from its own
    # directory: every backend of the peer was skipped with "attempted relative import".
    (tmp_path / "psycopg.py").write_text("from .backends import PG_DSN\n")
    worker = tmp_path / "fake_worker.py"
    worker.write_text(
        "import json, os, sys\n"
        "import peer_common, psycopg\n"
        "print(json.dumps({'psycopg': psycopg.__file__, 'beside': sorted(os.listdir(sys.path[0])),"
        " 'args': sys.argv[1:], 'cwd': os.getcwd(), 'steps': peer_common.W1_STEPS}))\n"
    )
    monkeypatch.setattr(peers, "_python", lambda: Path(sys.executable))
    got = peers._run_worker(peers.Peer("Fake", ("psycopg",), "import psycopg", str(worker)))
    assert isinstance(got, dict), got
    assert Path(got["psycopg"]).parent.name == "psycopg"  # the installed package
    assert got["beside"] == ["fake_worker.py", "peer_common.py"]
    assert got["args"][0] == str(REPS) and got["args"][1] == got["cwd"]
    assert got["steps"] == peer_common.W1_STEPS


def test_no_bench_module_is_named_as_a_package_the_peer_workers_import() -> None:
    # Run by hand from benchmarks/ (python benchmarks/peer_worker.py ...), a worker would
    # import such a module instead of the package.
    here = Path(peers.__file__).parent
    beside = {p.stem for p in here.glob("*.py")} | {p.name for p in here.iterdir() if p.is_dir()}
    imported: set[str] = set()
    sources = [(here / p.worker).read_text() for p in peers.PEERS]
    sources += [p.probe for p in peers.PEERS] + [(here / "peer_common.py").read_text()]
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    assert {"langgraph", "fastaiagent", "psycopg"} <= imported
    assert imported & beside == {"peer_common"}
