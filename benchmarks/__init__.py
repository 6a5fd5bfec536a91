"""``make bench``: how much durability costs tether, measured against the raw database floor.

Each workload runs on SQLite (WAL, ``synchronous=NORMAL`` and ``FULL``) and on Postgres when
``tether.store.postgres`` imports and the server answers. Results are printed as markdown
tables and written to ``benchmarks/results/latest.md`` (and a JSON twin, git-ignored).

Modules:
    report: repetition statistics, targets and markdown rendering.
    backends: the stores under test, fresh per workload, and the raw floor for each.
    workloads: W1-W5 (per-step cost, growth, resume, concurrency, agent).
    memory: the 10,000-step resident-memory run, executed in a child process.
    peers: the peer libraries, in their own venv, run as a child process.

Set ``TETHER_BENCH_QUICK=1`` for fewer repetitions while developing.
"""
