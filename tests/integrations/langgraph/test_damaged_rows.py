"""Saver rows damaged behind tether's back (a lost row, a bad restore, a hand edit): every read
refuses them with ``CorruptRecordError`` naming the thread, the row and the column, never a
state missing what a lost row held, nor a raw ``TypeError``/``ValueError`` from inside
(SQLite and Postgres; SQLite alone for values of another SQL type, which Postgres' typed
columns cannot hold)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from tests.hostile.conftest import raw_sql
from tether.errors import CorruptRecordError
from tether.integrations.langgraph import TetherSaver

STEPS = 40
NEWEST = "(SELECT max(seq) FROM {t}langgraph_checkpoints)"


def thread(store: Any, steps: int = STEPS, run_ids: list[str] | None = None) -> list[Any]:
    """A thread ``t`` of ``steps`` checkpoints, each appending one item to ``items``, the
    newest with two pending writes; the configs of its checkpoints, oldest first."""
    saver = TetherSaver(store)
    config: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    configs = []
    items: list[str] = []
    for i in range(steps):
        items = [*items, f"item {i} " + "x" * 600]
        cp = empty_checkpoint()
        cp["channel_values"] = {"items": items, "n": i}
        cp["channel_versions"] = {"items": i + 1, "n": i + 1}
        meta: dict[str, Any] = {"step": i}
        if run_ids is not None:
            meta["run_id"] = run_ids[i]
        config = saver.put(config, cp, meta, {})  # type: ignore[arg-type]
        configs.append(config)
    saver.put_writes(config, [("items", ["late"]), ("n", 7)], "task-1")
    return configs


def rows_of(store: Any) -> list[tuple[Any, ...]]:
    return raw_sql(store)("SELECT seq, base_seq, state_kind FROM {t}langgraph_checkpoints")


def items_at(saver: TetherSaver, config: Any) -> list[str]:
    got = saver.get_tuple(config)
    assert got is not None
    return list(got.checkpoint["channel_values"]["items"])


# --- a row missing from a thread's chain ----------------------------------------------------


def test_a_delta_row_deleted_from_the_middle_of_a_chain_is_refused_naming_the_thread_and_seq(
    store: Any,
) -> None:
    # get_state handed back 39 of the 40 items, without a word: the deleted row's append was
    # simply never replayed.
    configs = thread(store)
    kinds = {seq: (base, kind) for seq, base, kind in rows_of(store)}
    assert kinds[20] == (1, "delta") and kinds[STEPS] == (1, "delta")  # one chain from seq 1
    raw_sql(store)("DELETE FROM {t}langgraph_checkpoints WHERE seq = 20")
    fresh = TetherSaver(store)  # no head: the reads and the next put go to the rows
    reads = {
        "newest": lambda: fresh.get_tuple({"configurable": {"thread_id": "t"}}),
        "by id after the gap": lambda: fresh.get_tuple(configs[25]),
        "the row after the gap": lambda: fresh.get_tuple(configs[20]),
        "list": lambda: list(fresh.list({"configurable": {"thread_id": "t"}})),
        "list before": lambda: list(fresh.list(None, before=configs[30], limit=3)),
        "put": lambda: fresh.put(configs[-1], empty_checkpoint(), {}, {}),
    }
    for name, read in reads.items():
        with pytest.raises(CorruptRecordError) as info:
            read()
        error = info.value
        assert error.execution_id == "t" and error.seq == 20, (name, error)
        assert "thread 't'" in error.message and "seq 20" in error.message, (name, error)
    assert len(rows_of(store)) == STEPS - 1  # the refused put wrote nothing
    # Rows whose chain does not pass through the gap still read.
    assert len(items_at(fresh, configs[18])) == 19
    listed = list(fresh.list({"configurable": {"thread_id": "t"}}, before=configs[19]))
    assert [len(t.checkpoint["channel_values"]["items"]) for t in listed] == list(range(19, 0, -1))


def test_a_deleted_full_snapshot_is_refused_naming_the_thread_and_seq(store: Any) -> None:
    thread(store, steps=5)
    raw_sql(store)("DELETE FROM {t}langgraph_checkpoints WHERE seq = 1")
    fresh = TetherSaver(store)
    for read in (
        lambda: fresh.get_tuple({"configurable": {"thread_id": "t"}}),
        lambda: list(fresh.list({"configurable": {"thread_id": "t"}})),
    ):
        with pytest.raises(CorruptRecordError, match=r"thread 't'.*seq 1\b"):
            read()


def test_a_thread_whose_middle_run_was_deleted_reads_whole_and_takes_new_checkpoints(
    store: Any,
) -> None:
    # delete_for_runs leaves a gap in the seqs: the row after it is stored whole, so a gap is
    # only ever before a full snapshot and the chain check holds.
    runs = ["r1"] * 5 + ["r2"] * 5 + ["r3"] * 5
    configs = thread(store, steps=15, run_ids=runs)
    saver = TetherSaver(store)
    saver.delete_for_runs(["r2"])
    fresh = TetherSaver(store)
    assert len(items_at(fresh, {"configurable": {"thread_id": "t"}})) == 15
    assert [len(items_at(fresh, c)) for c in configs[:5] + configs[10:]] == [
        *range(1, 6),
        *range(11, 16),
    ]
    history = list(fresh.list({"configurable": {"thread_id": "t"}}))
    assert [len(t.checkpoint["channel_values"]["items"]) for t in history] == [
        *range(15, 10, -1),
        *range(5, 0, -1),
    ]
    cp = empty_checkpoint()
    cp["channel_values"] = {"items": ["only"], "n": 99}
    cp["channel_versions"] = {"items": 99, "n": 99}
    newest = fresh.put(configs[-1], cp, {}, {})
    assert items_at(TetherSaver(store), newest) == ["only"]


# --- a damaged value in a row ---------------------------------------------------------------

CP_SQL = "UPDATE {t}langgraph_checkpoints SET %s WHERE seq = " + NEWEST
WRITE_SQL = "UPDATE {t}langgraph_writes SET %s WHERE idx = 0"
FULL = "state_kind = 'full', base_seq = seq, state = ?"

# (id, statement, parameters, column named, SQLite only)
DAMAGE: list[tuple[str, str, tuple[Any, ...], str, bool]] = [
    ("metadata-not-an-object", CP_SQL % "metadata = ?", (b"[1, 2]",), "metadata", False),
    ("metadata-not-json", CP_SQL % "metadata = ?", (b"{bad",), "metadata", False),
    ("metadata-a-number", CP_SQL % "metadata = 5", (), "metadata", True),
    ("state-text", CP_SQL % "state = 'hello'", (), "state", True),
    ("state-a-number", CP_SQL % "state = 5", (), "state", True),
    ("state-kind-unknown", CP_SQL % "state_kind = 'zz'", (), "state", False),
    ("state-meta-not-an-object", CP_SQL % FULL, (b'{"m": [1]}',), "state", False),
    ("state-typed-value-not-an-object", CP_SQL % FULL, (b'{"t:items": 5}',), "state", False),
    (
        "state-typed-value-not-base64",
        CP_SQL % FULL,
        (b'{"t:n": {"t": "msgpack", "b": "!"}}',),
        "state",
        False,
    ),
    (
        "state-typed-value-garbage",
        CP_SQL % FULL,
        (b'{"t:n": {"t": "msgpack", "b": "wcHB"}}',),
        "state",
        False,
    ),
    ("state-field-not-an-object", CP_SQL % FULL, (b'{"x:pending_sends": 1}',), "state", False),
    ("state-versions-seen-not-an-object", CP_SQL % FULL, (b'{"S:node": 1}',), "state", False),
    ("seq-not-an-integer", CP_SQL % "seq = 'abc'", (), "seq", True),
    ("base-seq-not-an-integer", CP_SQL % "base_seq = 'abc'", (), "base_seq", True),
    ("parent-not-text", CP_SQL % "parent_checkpoint_id = x'ff'", (), "parent_checkpoint_id", True),
    (
        "write-msgpack-garbage",
        WRITE_SQL % "type = 'msgpack', value = ?",
        (b"\xc1\xc1\xc1",),
        "value",
        False,
    ),
    ("write-json-garbage", WRITE_SQL % "value = ?", (b"{bad",), "value", False),
    (
        "write-zstd-garbage",
        WRITE_SQL % "type = 'json+zstd', value = ?",
        (b"\x28\xb5\x2f\xfd",),
        "value",
        False,
    ),
    ("write-value-a-number", WRITE_SQL % "type = 'bytes', value = 5", (), "value", True),
    ("write-type-not-text", WRITE_SQL % "type = x'ff'", (), "type", True),
    ("write-channel-not-text", WRITE_SQL % "channel = x'ff'", (), "channel", True),
    ("write-task-not-text", WRITE_SQL % "task_id = x'ff'", (), "task_id", True),
    ("write-task-path-not-text", WRITE_SQL % "task_path = x'ff'", (), "task_path", True),
    ("write-idx-not-an-integer", WRITE_SQL % "idx = 'zz'", (), "idx", True),
]


@pytest.mark.parametrize(
    ("statement", "params", "column", "sqlite_only"),
    [pytest.param(*case[1:], id=case[0]) for case in DAMAGE],
)
def test_a_damaged_value_in_a_saver_row_is_a_corrupt_record_naming_thread_row_and_column(
    store: Any, statement: str, params: tuple[Any, ...], column: str, sqlite_only: bool
) -> None:
    # A metadata list was an AttributeError, a msgpack write a ValueError, a TEXT state a
    # TypeError, a seq 'abc' a ValueError; a number stored as a blob read as that many zero
    # bytes; a number where text belongs was handed to LangGraph as it was.
    if sqlite_only and not hasattr(store, "path"):
        pytest.skip("Postgres' typed columns cannot hold a value of another SQL type")
    configs = thread(store, steps=3)
    newest = configs[-1]["configurable"]["checkpoint_id"]
    assert raw_sql(store)(statement, params) == []
    fresh = TetherSaver(store)
    for read in (
        lambda: fresh.get_tuple({"configurable": {"thread_id": "t"}}),
        lambda: list(fresh.list({"configurable": {"thread_id": "t"}})),
    ):
        with pytest.raises(CorruptRecordError) as info:
            read()
        error = info.value
        text = error.message
        assert error.execution_id == "t" and "thread 't'" in text, text
        assert column in text, text
        assert newest in text or (error.seq == 3 and "seq 3" in text), text
