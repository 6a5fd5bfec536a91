"""The tether demo: crash a refund batch mid-run, resume it elsewhere, approve from code, fork
a what-if, and run a support agent that pauses for approval.

Run with ``make demo``. Everything is local and offline: SQLite files under ``out/``.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
DB = OUT / "refunds.db"
LEDGER = OUT / "ledger.jsonl"
DATA = HERE / "refunds.csv"
DB_URL_SHOWN = "sqlite:///out/refunds.db"  # as an operator types it in examples/refunds
DEMO_TOKEN = "demo-token-change-me"  # tether serve refuses a token under 16 characters
os.environ["REFUND_LEDGER"] = str(LEDGER)
sys.path.insert(0, str(HERE))

import support_agent  # noqa: E402
from refund_chain import build, load_requests  # noqa: E402

import tether  # noqa: E402


def eid_for(request_id: str) -> str:
    return f"refund-{request_id}"


def worker() -> None:
    """Process every request (the child the demo kills), skipping finished ones."""
    store = tether.connect(f"sqlite:///{DB}")
    chain = build(store)
    for req in load_requests(DATA):
        eid = eid_for(req["request_id"])
        run = store.get_run(eid)
        if run is None:
            chain.run(req, execution_id=eid)
        elif run.status in ("running", "failed"):
            chain.resume(eid)


def say(text: str = "") -> None:
    print(text, flush=True)


def crash_and_resume(store: tether.Checkpointer, n_requests: int) -> None:
    say("\n1. A worker process starts the batch ... and is killed with SIGKILL mid-run.")
    child = subprocess.Popen([sys.executable, __file__, "--worker"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(store.list_runs(limit=1000)) < n_requests // 2:
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    runs = store.list_runs(limit=1000)
    by_status = dict(Counter(r.status for r in runs))
    say(f"   killed after {len(runs)} of {n_requests} runs started: {by_status}")
    paid = len(LEDGER.read_text().splitlines()) if LEDGER.exists() else 0
    say(f"   the ledger holds {paid} payments so far")
    for run in runs:
        if run.status == "running":
            last = tether.latest_resumable(store, run.execution_id)
            where = (
                f"after {last.node_id!r} (step {last.seq}); next is {last.next_node_id!r}"
                if last
                else "before its first step committed"
            )
            say(f"   {run.execution_id} was cut off {where}")

    say("\n2. A fresh process resumes the batch: committed steps are not run again.")
    subprocess.run([sys.executable, __file__, "--worker"], check=True)
    say(f"   runs now: {dict(Counter(r.status for r in store.list_runs(limit=1000)))}")


def tether_cli(*args: str) -> None:
    """Run ``tether ARGS --app refund_chain:app --db <the demo's store>`` as an operator
    would, from this directory, showing the command and its output."""
    shown = " ".join(shlex.quote(a) for a in args)
    say(f"   $ tether {shown} --app refund_chain:app --db {DB_URL_SHOWN}")
    argv = [sys.executable, "-m", "tether.cli", *args, "--app", "refund_chain:app"]
    argv += ["--db", f"sqlite:///{DB}"]
    done = subprocess.run(argv, cwd=HERE, capture_output=True, text=True, check=False)
    for line in (done.stdout + done.stderr).splitlines():
        say(f"     {line}")
    if done.returncode != 0:
        raise SystemExit(f"the command failed (exit {done.returncode})")


def approve_pending(store: tether.Checkpointer) -> str:
    """Answer every paused refund: one through the CLI, the rest from code; returns the id of
    the one the CLI approved."""
    pending = store.list_pending_interrupts(limit=1000)
    say(f"\n3. {len(pending)} refunds wait for a manager; no process is alive meanwhile:")
    for p in pending:
        c = p.context
        say(
            f"   {c['request_id']}  {c['amount']:>8} {c['currency']}  risk {c['risk']:.2f}  "
            f"{c['reason']}"
        )

    say("\n4. An operator approves one from the command line (it resumes the run right there):")
    first = next(p for p in pending if p.context["risk"] < 0.6)
    tether_cli("approve", first.execution_id, "--note", "within policy", "--by", "m.okafor")

    say("\n5. The manager answers the rest from code: approve risk < 0.6, reject the rest.")
    chain = build(store)
    for p in pending:
        if p is first:
            continue
        approve = p.context["risk"] < 0.6
        answer = tether.Resume(approved=approve, metadata={"reviewer": "m.okafor"})
        result = chain.resume(p.execution_id, answer)
        verdict = "approved" if approve else "rejected"
        say(f"   {p.context['request_id']}: {verdict} -> run {result.status}")
    try:
        chain.resume(pending[0].execution_id, tether.Resume(approved=True))
    except tether.AlreadyResumed as exc:
        say(
            f"   answering {pending[0].context['request_id']} again is refused: "
            f"AlreadyResumed ({exc})"
        )
    return first.execution_id


def fork_what_if(store: tether.Checkpointer) -> str | None:
    say("\n6. What if the manager had approved a rejected refund? Fork the paused checkpoint.")
    chain = build(store)
    for run in store.list_runs(runner_name="refunds", limit=1000):
        rows = store.list(run.execution_id)
        paused = [c for c in rows if c.status == "interrupted"]
        if paused and rows[-2].state_snapshot.get("approved") is False:
            branch = chain.fork(
                run.execution_id,
                paused[0].checkpoint_id,
                resume_value=tether.Resume(approved=True, metadata={"reviewer": "what-if"}),
            )
            outcome = branch.output["outcome"] if branch.output else branch.status
            say(
                f"   {run.execution_id} (rejected) forked as {branch.execution_id[:12]}…: "
                f"{outcome}; the original still says "
                f"{store.list(run.execution_id)[-2].state_snapshot['outcome']}"
            )
            return branch.execution_id
    return None


def timelines(store: tether.Checkpointer, requests: list[dict]) -> None:
    say("\n7. Outcome and checkpoint timeline of each request:")
    for req in requests:
        eid = eid_for(req["request_id"])
        rows = store.list(eid)
        final = rows[-2].state_snapshot if len(rows) > 1 else {}
        timeline = " > ".join(
            c.node_id + ("(paused)" if c.status == "interrupted" else "") for c in rows
        )
        status = store.get_run(eid).status
        say(f"   {req['request_id']} {status:9} {final.get('outcome', '?'):9} {timeline}")


def ledger_check(store: tether.Checkpointer, requests: list[dict], fork_eid: str | None) -> None:
    lines = [json.loads(line) for line in LEDGER.read_text().splitlines()]
    per_run = Counter(e["execution_id"] for e in lines)
    expected = {
        eid_for(r["request_id"])
        for r in requests
        if store.list(eid_for(r["request_id"]))[-2].state_snapshot.get("outcome") == "refunded"
    }
    if fork_eid:
        expected.add(fork_eid)
    assert set(per_run) == expected, set(per_run) ^ expected
    assert all(n == 1 for n in per_run.values()), per_run
    n_rows = sum(len(store.list(eid)) for eid in expected)
    say(
        f"\n8. Ledger check: {len(lines)} payments for {len(expected)} refunded runs (one of "
        f"them the what-if fork), each exactly once, after a SIGKILL and a resume. OK "
        f"({n_rows} checkpoints)"
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker()
        return
    OUT.mkdir(exist_ok=True)
    for p in (DB, LEDGER, Path(f"{DB}-wal"), Path(f"{DB}-shm")):
        p.unlink(missing_ok=True)
    requests = load_requests(DATA)
    say(
        f"tether demo: {len(requests)} refund requests from {DATA.name}; "
        f"store {DB.relative_to(HERE.parent.parent)}"
    )
    store = tether.connect(f"sqlite:///{DB}")
    crash_and_resume(store, len(requests))
    approved = approve_pending(store)
    fork_eid = fork_what_if(store)
    timelines(store, requests)
    ledger_check(store, requests, fork_eid)
    say(
        "   Look inside: sqlite3 examples/refunds/out/refunds.db "
        "'select execution_id, seq, node_id, status from checkpoints limit 12'"
    )
    store.close()

    say("\n9. A support agent over the same data pauses in a tool for approval; a fresh process")
    say("   approves and resumes it:")
    support_agent.main()

    say("\n10. The operator's side: every run, its timeline and who answered it (the audit trail)")
    say("    in the approvals page, from this directory:")
    say("      cd examples/refunds")
    say(f"      TETHER_UI_TOKEN={DEMO_TOKEN} \\")
    say(f"        tether serve --db {DB_URL_SHOWN} --app refund_chain:app")
    say(f"    then open http://127.0.0.1:8000/runs (log in with {DEMO_TOKEN}). In a terminal:")
    say(f"      tether runs list --db {DB_URL_SHOWN}")
    say(f"      tether runs show {approved} --db {DB_URL_SHOWN}")


if __name__ == "__main__":
    main()
