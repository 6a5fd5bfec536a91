"""The tether demo: crash a refund batch mid-run, resume it elsewhere, approve from code.

Run with ``make demo``. Everything is local and offline: one SQLite file under ``out/``.
"""

from __future__ import annotations

import json
import os
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
os.environ["REFUND_LEDGER"] = str(LEDGER)
sys.path.insert(0, str(HERE))

import tether  # noqa: E402
from refund_chain import build, load_requests  # noqa: E402


def eid_for(request_id: str) -> str:
    return f"refund-{request_id}"


def worker() -> None:
    """Process every request (the child the demo kills)."""
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


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker()
        return
    OUT.mkdir(exist_ok=True)
    for p in (DB, LEDGER, Path(f"{DB}-wal"), Path(f"{DB}-shm")):
        p.unlink(missing_ok=True)
    requests = load_requests(DATA)
    say(f"tether demo: {len(requests)} refund requests from {DATA.name}, store {DB.relative_to(HERE.parent.parent)}")

    # 1. Process the batch in a child process, and kill it (SIGKILL) part-way through.
    say("\n1. A worker process starts the batch ... and is killed with SIGKILL mid-run.")
    child = subprocess.Popen([sys.executable, __file__, "--worker"])
    store = tether.connect(f"sqlite:///{DB}")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(store.list_runs(limit=1000)) < len(requests) // 2:
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    runs = store.list_runs(limit=1000)
    by_status = Counter(r.status for r in runs)
    say(f"   killed after {len(runs)} of {len(requests)} runs started: {dict(by_status)}")
    charged_before = len(LEDGER.read_text().splitlines()) if LEDGER.exists() else 0
    say(f"   ledger holds {charged_before} payments so far")
    for run in runs:
        if run.status == "running":
            last = tether.latest_resumable(store, run.execution_id)
            where = f"after {last.node_id!r} (step {last.seq}), next {last.next_node_id!r}" if last else "before its first step"
            say(f"   {run.execution_id} was cut off {where}")

    # 2. A fresh process picks the batch up where the dead one stopped.
    say("\n2. A fresh process resumes the batch: committed steps are not run again.")
    subprocess.run([sys.executable, __file__, "--worker"], check=True)
    by_status = Counter(r.status for r in store.list_runs(limit=1000))
    say(f"   runs now: {dict(by_status)}")

    # 3. Refunds over the limit wait for a manager, with no process alive.
    pending = store.list_pending_interrupts(limit=1000)
    say(f"\n3. {len(pending)} refunds wait for a manager (no process is alive meanwhile):")
    for p in pending:
        c = p.context
        say(f"   {c['request_id']}  {c['amount']:>8} {c['currency']}  risk {c['risk']:.2f}  {c['reason']}")

    # 4. The manager answers from code: approve low risk, reject the rest.
    say("\n4. The manager answers: approve risk < 0.6, reject the rest.")
    chain = build(store)
    for p in pending:
        approve = p.context["risk"] < 0.6
        result = chain.resume(
            p.execution_id, tether.Resume(approved=approve, metadata={"reviewer": "m.okafor"})
        )
        say(f"   {p.context['request_id']}: {'approved' if approve else 'rejected'} -> {result.status}")
    try:
        chain.resume(pending[0].execution_id, tether.Resume(approved=True))
    except tether.AlreadyResumed as exc:
        say(f"   answering {pending[0].context['request_id']} twice is refused: AlreadyResumed ({exc})")

    # 5. Every request: final outcome and its checkpoint timeline.
    say("\n5. Outcome and checkpoint timeline of each request:")
    for req in requests:
        eid = eid_for(req["request_id"])
        run = store.get_run(eid)
        rows = store.list(eid)
        final = rows[-2].state_snapshot if len(rows) > 1 else {}
        timeline = " > ".join(
            c.node_id + ("(paused)" if c.status == "interrupted" else "") for c in rows
        )
        say(f"   {req['request_id']} {run.status:9} {final.get('outcome', '?'):9} {timeline}")

    # 6. Proof: every refund that should be paid is in the ledger exactly once.
    lines = [json.loads(line) for line in LEDGER.read_text().splitlines()]
    paid = Counter(e["request_id"] for e in lines)
    expected = set()
    for req in requests:
        rows = store.list(eid_for(req["request_id"]))
        if rows[-2].state_snapshot.get("outcome") == "refunded":
            expected.add(req["request_id"])
    assert set(paid) == expected, (set(paid) ^ expected)
    assert all(n == 1 for n in paid.values()), paid
    total_steps = sum(len(store.list(eid_for(r["request_id"]))) for r in requests)
    say(f"\n6. Ledger check: {len(lines)} payments for {len(expected)} refunded requests, "
        f"each exactly once ({total_steps} checkpoints in {DB.name}). OK")
    say("   Try: sqlite3 examples/refunds/out/refunds.db 'select execution_id, seq, node_id, status from checkpoints limit 12'")


if __name__ == "__main__":
    main()
