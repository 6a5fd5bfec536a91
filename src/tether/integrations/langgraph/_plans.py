"""The saver's operations, each written once as a plan (see :mod:`._backend`).

Plans read and write rows; they neither encode nor decode values (that is CPU work, done by
the saver outside the connection), except where a rewrite of stored states must happen inside
the transaction that deletes rows (``delete_for_runs``, ``prune``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ...store import encoding
from ...store import langgraph_sql as q
from ._backend import Backend, Plan
from ._rows import COMPRESSED_SUFFIX, Loaded, Row, replay, replayed, row_of

__all__ = ["COMPRESSED_SUFFIX", "Loaded", "Row"]


def _row(thread_id: str, ns: str, r: Sequence[Any]) -> Row:
    # (checkpoint_id, seq, base_seq, parent_checkpoint_id, state_kind, state, metadata)
    return row_of(thread_id, ns, (r[0], r[1], r[2], r[3], r[6]))


def put(
    b: Backend,
    key: tuple[str, str],
    checkpoint_id: str,
    parent_id: str | None,
    encoded: tuple[str, bytes, int, int, int | None],
    metadata: bytes,
    run_id: str | None,
) -> Plan[bool]:
    """Insert one checkpoint row; ``False`` when the thread moved on under the writer (the
    seq is taken, or a delta's base row is gone or rewritten) and nothing was stored.

    ``encoded`` is ``(state_kind, payload, seq, base_seq, prev_seq)``.
    """
    thread_id, ns = key
    kind, payload, seq, base_seq, prev_seq = encoded
    params: list[Any] = [
        thread_id,
        ns,
        checkpoint_id,
        seq,
        base_seq,
        parent_id,
        kind,
        payload,
        metadata,
        run_id,
        b.now(),
    ]
    if kind == "delta":
        template = q.INSERT_DELTA
        params += [thread_id, ns, prev_seq, base_seq]
    else:
        template = q.INSERT_FULL
    try:
        result = yield b.last(template, params)
    except Exception as exc:
        if b.is_unique_violation(exc):
            return False
        raise
    return bool(result.rowcount)


def newest_by_seq(b: Backend, key: tuple[str, str]) -> Plan[tuple[Row, str, dict[str, Any]] | None]:
    """The thread namespace's last written row, its kind and raw state (a writer's head)."""
    r = (yield b.q(q.SELECT_LAST_SEQ), key).one()
    if r is None:
        return None
    row = _row(*key, r)
    chain = (yield b.q(q.SELECT_CHAIN), (*key, row.base_seq, row.seq)).rows
    return row, r[4], replay(row, chain)


def get(b: Backend, key: tuple[str, str], checkpoint_id: str | None) -> Plan[Loaded | None]:
    """One checkpoint (the newest by id when ``checkpoint_id`` is None) with its writes."""
    if checkpoint_id is None:
        r = (yield b.q(q.SELECT_NEWEST), key).one()
    else:
        r = (yield b.q(q.SELECT_BY_ID), (*key, checkpoint_id)).one()
    if r is None:
        return None
    row = _row(*key, r)
    if r[4] == "full":  # a row whose snapshot is its own: replayed from it alone
        row_at = Row(*key, row.checkpoint_id, row.seq, row.seq, None, b"")
        chain: Sequence[Any] = [(row.seq, "full", r[5])]
    else:
        row_at = row
        chain = (yield b.q(q.SELECT_CHAIN), (*key, row.base_seq, row.seq)).rows
    writes = (yield b.q(q.SELECT_WRITES), (*key, row.checkpoint_id, row.checkpoint_id)).rows
    return Loaded(row, replay(row_at, chain), [w[1:] for w in writes])


def candidates(
    b: Backend,
    thread_id: str | None,
    ns: str | None,
    checkpoint_id: str | None,
    before: str | None,
) -> Plan[list[Row]]:
    """Rows ``list()`` may return, newest id first, without states."""
    sql = q.LIST_HEAD
    params: list[Any] = []
    for cond, value in (
        (q.LIST_BY_THREAD, thread_id),
        (q.LIST_BY_NS, ns),
        (q.LIST_BY_ID, checkpoint_id),
        (q.LIST_BEFORE, before),
    ):
        if value is not None:
            sql += cond
            params.append(value)
    rows = (yield b.q(sql + q.LIST_ORDER), params).rows
    return [row_of(r[0], r[1], r[2:7]) for r in rows]


def load_states(b: Backend, chosen: Sequence[Row]) -> Plan[list[Loaded]]:
    """The states and writes of ``chosen`` rows: per thread namespace, one read of the rows
    from the oldest chosen row's full snapshot to the newest, replayed once."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in chosen:
        groups.setdefault((row.thread_id, row.checkpoint_ns), []).append(row)
    out: dict[tuple[str, str, str], Loaded] = {}
    for key, rows in groups.items():
        lo = min(r.base_seq for r in rows)
        hi = max(r.seq for r in rows)
        chain = (yield b.q(q.SELECT_CHAIN), (*key, lo, hi)).rows
        wanted = {r.seq: r for r in rows}
        ids = sorted(r.checkpoint_id for r in rows)
        writes: dict[str, list[tuple[Any, ...]]] = {}
        for w in (yield b.q(q.SELECT_WRITES), (*key, ids[0], ids[-1])).rows:
            writes.setdefault(w[0], []).append(w[1:])
        if not chain or chain[0][0] != lo:
            replay(min(rows, key=lambda r: r.base_seq), chain)  # raises: its snapshot is gone
        for seq, base, cur in replayed(*key, chain):
            hit = wanted.get(seq)
            if hit is None:
                continue
            if base != hit.base_seq:  # its snapshot is gone, or the rows are not its own
                replay(hit, [r for r in chain if hit.base_seq <= r[0] <= seq])  # raises
            out[(*key, hit.checkpoint_id)] = Loaded(hit, cur, writes.get(hit.checkpoint_id, []))
    return [out[(r.thread_id, r.checkpoint_ns, r.checkpoint_id)] for r in chosen]


def put_writes(
    b: Backend,
    key: tuple[str, str, str],
    rows: Sequence[tuple[str, int, str, str, bytes, str]],
    replace: bool,
) -> Plan[None]:
    """Store a task's writes ``(task_id, idx, channel, type, value, task_path)``; special
    channels (``replace``) overwrite, others keep the first write of a ``(task, idx)``. One
    statement for a task's writes (the usual case), so it commits in one round trip."""
    # One statement cannot touch a row twice: of rows sharing (task, idx), the last replaces
    # and the first is kept, as when they are stored one after another.
    unique: dict[tuple[str, int], tuple[str, int, str, str, bytes, str]] = {}
    for row in rows:
        if replace or (row[0], row[1]) not in unique:
            unique[(row[0], row[1])] = row
    todo = list(unique.values())
    size = q.WRITES_PER_STATEMENT
    batches = [todo[i : i + size] for i in range(0, len(todo), size)]
    for n, batch in enumerate(batches):
        params = [v for task_id, idx, ch, t, value, path in batch
                  for v in (*key, task_id, idx, ch, t, value, path)]  # fmt: skip
        template = q.insert_writes(len(batch), replace)
        if n == len(batches) - 1 and n == 0:
            yield b.last(template, params)
        else:
            yield b.q(template), params


def delete_thread(b: Backend, thread_id: str) -> Plan[None]:
    """Every checkpoint and write of the thread, in every namespace."""
    yield b.q(q.DELETE_THREAD_WRITES), (thread_id,)
    yield b.q(q.DELETE_THREAD_CHECKPOINTS), (thread_id,)


def _reencode(
    b: Backend,
    key: tuple[str, str],
    states: list[tuple[int, dict[str, Any]]],
    min_bytes: int | None,
) -> Plan[None]:
    """Rewrite the states of a namespace's remaining rows as a fresh chain (after rows it
    depended on were deleted)."""
    head: encoding.Head | None = None
    for seq, raw in states:
        keys: dict[str, encoding.Encoded] = {k: orjson.dumps(v) for k, v in raw.items()}
        if head is not None and head.seq != seq - 1:
            # Rows before it were deleted: it is stored whole, so that a gap in a thread's
            # seqs is only ever before a full snapshot and a delta after one is damage.
            head = None
        if head is not None:
            head.seq = seq - 1
        kind, payload, head = encoding.encode_state(head, keys)
        head.seq = seq
        if kind == "full":
            head.base_seq = seq
        yield (
            b.q(q.UPDATE_STATE),
            (kind, encoding.compress_state(payload, min_bytes), head.base_seq, *key, seq),
        )


def delete_for_runs(b: Backend, run_ids: Sequence[str], min_bytes: int | None) -> Plan[set[str]]:
    """Delete the checkpoints (and their writes) that these LangGraph runs wrote; the rows left
    in each namespace they touched are re-chained. Returns the threads touched."""
    touched: set[str] = set()
    for run_id in run_ids:
        keys = [(r[0], r[1]) for r in (yield b.q(q.SELECT_THREADS_OF_RUNS), (run_id,)).rows]
        for key in keys:
            touched.add(key[0])
            all_rows = [(_row(*key, r), r) for r in (yield b.q(q.SELECT_ALL_OF_NS), key).rows]
            chain = [(row.seq, r[4], r[5]) for row, r in all_rows]
            kept: list[tuple[int, dict[str, Any]]] = []
            # Replayed whole before anything is deleted: a damaged chain is refused, not
            # rewritten into a state without what its lost rows held.
            states = [cur for _, _, cur in replayed(*key, chain)]
            for (row, r), cur in zip(all_rows, states, strict=True):
                if r[7] != run_id:
                    kept.append((row.seq, cur))
                else:
                    yield b.q(q.DELETE_CHECKPOINT_WRITES), (*key, row.checkpoint_id)
                    yield b.q(q.DELETE_CHECKPOINT), (*key, row.checkpoint_id)
            yield from _reencode(b, key, kept, min_bytes)
    return touched


def prune_keep_latest(b: Backend, thread_id: str, min_bytes: int | None) -> Plan[None]:
    """Keep only each namespace's newest checkpoint (by id) and its writes, stored full."""
    namespaces = [r[0] for r in (yield b.q(q.SELECT_NAMESPACES), (thread_id,)).rows]
    for ns in namespaces:
        key = (thread_id, ns)
        loaded = yield from get(b, key, None)
        if loaded is None:  # pragma: no cover - the namespace was just listed
            continue
        newest = loaded.row.checkpoint_id
        payload = encoding.compress_state(orjson.dumps(loaded.raw), min_bytes)
        yield b.q(q.UPDATE_STATE), ("full", payload, loaded.row.seq, *key, loaded.row.seq)
        yield b.q(q.DELETE_NS_WRITES_EXCEPT), (*key, newest)
        yield b.q(q.DELETE_NS_EXCEPT), (*key, newest)


def copy_thread(b: Backend, source: str, target: str) -> Plan[bool]:
    """Copy every row of ``source`` to ``target``; ``False`` (nothing copied) when
    ``target`` already has checkpoints."""
    if (yield b.q(q.SELECT_THREAD_EXISTS), (target,)).one() is not None:
        return False
    yield b.q(q.COPY_CHECKPOINTS), (target, source)
    yield b.q(q.COPY_WRITES), (target, source)
    return True
