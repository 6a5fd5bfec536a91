"""The shared delta codec and the writer's head cache."""

from __future__ import annotations

import base64
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard

import tether
from tests.support.results import last_row
from tether import Checkpoint, serde
from tether.errors import CorruptRecordError
from tether.store import _compression, _delta, _heads, _node_input, _replay
from tether.store.base import RunRecord


def _keys(state: dict[str, Any]) -> dict[str, _delta.Encoded]:
    """``state`` encoded per key, as ``encode_state`` takes it."""
    return dict(_delta.encode_keys(state))


def _head(seq: int) -> _delta.Head:
    return _delta.Head(seq, 1, {"k": b"1"}, seq - 1, 0)


def test_head_cache_never_moves_back():
    cache = _heads.HeadCache()
    cache.set("run", _head(4))
    cache.set("run", _head(3))  # a reader that loaded an older row, late
    assert (head := cache.get("run")) is not None and head.seq == 4
    cache.drop("run")
    cache.set("run", _head(3))
    assert (head := cache.get("run")) is not None and head.seq == 3


def test_append_is_found_by_bytes_and_replayed():
    keys1 = _keys({"log": ["a"], "n": 1})
    kind, payload, head = _delta.encode_state(None, keys1)
    assert kind == "full"
    keys2 = _keys({"log": ["a", "b"], "n": 1})
    kind2, payload2, _head2 = _delta.encode_state(head, keys2)
    assert kind2 == "delta" and payload2 == b'{"a":{"log":["b"]}}'
    raw = _replay.replay_state([(1, kind, payload), (2, kind2, payload2)])
    assert raw == {"log": ["a", "b"], "n": 1}


def test_deleted_and_replaced_keys():
    _, p1, h1 = _delta.encode_state(None, _keys({"a": [1, 2], "b": 1}))
    _, p2, _ = _delta.encode_state(h1, _keys({"a": [2]}))
    assert _replay.replay_state([(1, "full", p1), (2, "delta", p2)]) == {"a": [2]}


def test_encode_next_appends_only_the_new_tail_of_a_grown_list():
    log = ["a" * 10]
    _, _, h1 = _delta.encode_next(None, {"log": log, "n": 1})
    grown = [*log, "b"]
    kind, payload, h2 = _delta.encode_next(h1, {"log": grown, "n": 1})
    assert kind == "delta" and payload == b'{"a":{"log":["b"]}}'
    # in-place mutation of an earlier item is still caught (identity differs -> full compare)
    changed = ["z", "b"]
    _, payload3, _h3 = _delta.encode_next(h2, {"log": changed, "n": 1})
    assert payload3 == b'{"s":{"log":["z","b"]}}'
    raw = _replay.replay_state(
        [
            (1, "full", b'{"log":["aaaaaaaaaa"],"n":1}'),
            (2, "delta", payload),
            (3, "delta", payload3),
        ]
    )
    assert raw == {"log": ["z", "b"], "n": 1}


def test_chunked_lists_join_back_to_the_same_bytes_on_a_full_snapshot():
    import orjson

    items = [f"item-{i}" for i in range(200)]
    head: _delta.Head | None = None
    log: list[str] = []
    for i in range(200):
        log = [*log, items[i]]
        kind, payload, head = _delta.encode_next(head, {"log": log}, force_full=(i == 150))
        if i == 150:
            assert kind == "full" and orjson.loads(payload) == {"log": items[:151]}
    assert head is not None and isinstance(head.keys["log"], _delta.Chunks)
    assert head.keys["log"].join() == orjson.dumps(items)


def test_chunks_grown_from_one_another_share_parts_and_each_keeps_its_own_value():
    items = [f"item-{i}" for i in range(600)]
    value = _delta.Chunks([b"[]"])
    grown = [value]
    for item in items:
        value = value.grow(orjson.dumps([item]))
        grown.append(value)
    assert value.parts is grown[1].parts  # appending copied no parts
    assert value.join() == orjson.dumps(items)
    assert grown[10].join() == orjson.dumps(items[:10])  # earlier values are left as they were
    # growing an older value (a head kept for a retry) branches off, leaving the newer intact
    branch = grown[10].grow(b'["other"]')
    assert branch.join() == orjson.dumps([*items[:10], "other"])
    assert value.join() == orjson.dumps(items) and grown[11].join() == orjson.dumps(items[:11])
    assert value.grow(b"[]").join() == orjson.dumps(items)


@pytest.mark.parametrize("length", [100, 5000])
def test_a_grown_list_costs_its_new_items_and_a_replaced_first_or_recent_item_is_caught(length):
    log = [f"m{i}" for i in range(length)]
    _, _, head = _delta.encode_next(None, {"log": log})
    for i in range(length, length + 10):
        log = [*log, f"m{i}"]
        kind, payload, head = _delta.encode_next(head, {"log": log})
        assert kind == "delta" and payload == b'{"a":{"log":["m%d"]}}' % i
    same = list(log)
    assert _delta.encode_next(head, {"log": same})[1] == b"{}"
    for changed in (
        [*log[:-1], "changed", "new"],  # the newest item replaced, one appended
        ["changed", *log[1:], "new"],  # the first item replaced
        [*log[:-1], "changed"],  # replaced, nothing appended
        log[:50],  # shorter
    ):
        _, payload, _ = _delta.encode_next(head, {"log": changed})
        assert orjson.loads(payload) == {"s": {"log": changed}}


@pytest.mark.parametrize("length", [1024, 20_000])
def test_any_replaced_item_of_a_list_of_any_length_is_caught(length):
    todo = [f"task {i}: open" for i in range(length)]
    _, _, head = _delta.encode_next(None, {"todo": todo})
    todo[500] = "task 500: done"  # in place, the same list object
    _, payload, head = _delta.encode_next(head, {"todo": todo})
    assert orjson.loads(payload) == {"s": {"todo": todo}}
    grown = [*todo[:10], "task 10: done", *todo[11:], f"task {length}: open"]
    _, payload, _ = _delta.encode_next(head, {"todo": grown})
    assert orjson.loads(payload) == {"s": {"todo": grown}}


@pytest.mark.parametrize(
    ("before", "after"),
    [(1, True), (0, False), (2, 2.0), (0.0, -0.0), (True, 1.0)],
    ids=["int-bool", "zero-false", "int-float", "zero-negative-zero", "bool-float"],
)
def test_an_item_replaced_in_place_by_an_equal_number_of_another_kind_is_stored(before, after):
    """``1 == True == 1.0``: an equal item is not the same JSON, so a list of numbers never
    takes the equality shortcut and the replaced item is stored, alone or with an append."""
    log = ["a", before, "b"]
    _, _, head = _delta.encode_next(None, {"log": log})
    log[1] = after
    _, payload, head = _delta.encode_next(head, {"log": log})
    assert payload == b'{"s":{"log":%s}}' % orjson.dumps(log)
    log[1] = before
    log.append("c")
    _, payload, _ = _delta.encode_next(head, {"log": log})
    assert payload == b'{"s":{"log":%s}}' % orjson.dumps(log)


def test_mutable_items_never_take_the_identity_shortcut():
    row = {"x": 1}
    _, _, h1 = _delta.encode_next(None, {"rows": [row]})
    row["x"] = 2  # mutated in place: same object, different content
    _kind, payload, _ = _delta.encode_next(h1, {"rows": [row, {"y": 3}]})
    assert payload == b'{"s":{"rows":[{"x":2},{"y":3}]}}'


def test_frozen_dicts_take_the_identity_shortcut_and_read_back_as_dicts():
    from tether.serde import FrozenDict

    m1, m2 = FrozenDict(role="user", content="hi"), FrozenDict(role="assistant", content="yo")
    _, _, h1 = _delta.encode_next(None, {"messages": [m1]})
    kind, payload, _ = _delta.encode_next(h1, {"messages": [m1, m2]})
    assert payload == b'{"a":{"messages":[{"role":"assistant","content":"yo"}]}}'
    raw = _replay.replay_state(
        [(1, "full", b'{"messages":[{"role":"user","content":"hi"}]}'), (2, kind, payload)]
    )
    state = _replay.decode_state(raw)
    assert state == {"messages": [dict(m1), dict(m2)]}
    assert type(state["messages"][0]) is dict


# --- node_input values shared with the row's state ------------------------------------------

ARGS_TEXT = "a" * 500


def _assistant(i: int) -> serde.FrozenDict:
    args = {"text": f"{i}:{ARGS_TEXT}"}
    call = {"id": f"call-{i}", "name": "note", "arguments": args}
    return serde.FrozenDict({"role": "assistant", "tool_calls": [call]})


def _tool_input(message: serde.FrozenDict) -> dict:
    call = message["tool_calls"][0]
    return {"tool_call_id": call["id"], "name": call["name"], "arguments": call["arguments"]}


def test_node_input_value_held_by_the_state_is_stored_once_as_a_reference():
    messages = [_assistant(0), serde.FrozenDict({"role": "tool", "content": "x"}), _assistant(1)]
    state = {"messages": messages, "turn": 1}
    node_input = _tool_input(messages[-1])
    stored = _node_input.dump_node_input(node_input, state)
    assert stored is not None and len(stored) < 150 and ARGS_TEXT.encode() not in stored
    assert orjson.loads(stored)["arguments"] == {
        "__tether__": "ref",
        "v": ["messages", 2, "tool_calls", 0, "arguments"],
    }
    decoded = _replay.decode_state(orjson.loads(_delta.encode_next(None, state)[1]))
    back = _node_input.load_node_input(stored, decoded, ("cp-1", "run-1", 3, "turn:1/tool:note"))
    assert back == node_input
    # the value read back is the reader's own: changing it leaves the state as stored
    back["arguments"]["text"] = "changed"
    assert decoded["messages"][2]["tool_calls"][0]["arguments"]["text"] == f"1:{ARGS_TEXT}"


def test_no_reference_for_a_value_the_state_does_not_hold_by_identity():
    messages = [_assistant(0)]
    state = {"messages": messages}
    equal_copy = {
        **_tool_input(messages[0]),
        "arguments": dict(messages[0]["tool_calls"][0]["arguments"]),
    }
    assert _node_input.dump_node_input(equal_copy, state) == serde.dumps(equal_copy)
    # held, but far behind the newest items of the list: not searched, stored in full
    old = [_assistant(i) for i in range(_node_input.REF_SCAN_ITEMS + 1)]
    early = _tool_input(old[0])
    assert _node_input.dump_node_input(early, {"messages": old}) == serde.dumps(early)
    # a small value whose reference would be longer than itself stays inline
    small = {"a": 1}
    tiny = {"arguments": small}
    assert _node_input.dump_node_input(tiny, {"messages": [{"arguments": small}]}) == serde.dumps(
        tiny
    )


def test_a_user_value_shaped_like_a_reference_reads_back_as_data():
    lookalike = {"__tether__": "ref", "v": ["messages", 0]}
    state = {"messages": [{"role": "user", "content": "hi"}]}
    node_input = {"arguments": lookalike, "name": "x"}
    stored = _node_input.dump_node_input(node_input, state)
    row = ("cp-1", "run-1", 1, "n")
    assert _node_input.load_node_input(stored, state, row) == node_input


def _raw_sql(store, sql: str, params: tuple = (), table: str = "checkpoints") -> list[tuple]:
    """Run ``sql`` on the store's own database (``{t}`` = its ``table``)."""
    if hasattr(store, "schema"):  # Postgres
        import psycopg

        from tests.conftest import PG_DSN

        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            cur = conn.execute(sql.format(t=f'"{store.schema}".{table}'), params)
            return cur.fetchall() if cur.description else []
    import sqlite3

    lite = sqlite3.connect(store.path)
    try:
        with lite:
            return lite.execute(sql.format(t=table).replace("%s", "?"), params).fetchall()
    finally:
        lite.close()


def _tool_rows(store, eid: str, n: int) -> dict[str, dict]:
    """``n`` tool_call rows whose node_input shares its arguments with the row's state, a
    2 KB state value replaced on every row so that full snapshots come back every ~16 rows;
    returns the node_input written per checkpoint_id."""
    store.create_run(RunRecord(eid, "agent-a", "agent"))
    messages: list = [serde.FrozenDict({"role": "user", "content": "go"})]
    written: dict[str, dict] = {}
    for i in range(n):
        messages = [*messages, _assistant(i)]
        node_input = _tool_input(messages[-1])
        cp = Checkpoint(
            execution_id=eid,
            node_id=f"turn:{i}/tool:note",
            step_type="tool_call",
            status="completed",
            state_snapshot={"messages": messages, "scratch": str(i) * 2000},
            node_input=node_input,
            agent_path="agent:a/tool:note",
        )
        store.put(cp)
        written[cp.checkpoint_id] = orjson.loads(orjson.dumps(node_input))
        messages = [*messages, serde.FrozenDict({"role": "tool", "content": f"r{i}"})]
    return written


def test_shared_tool_arguments_read_back_as_written_on_every_read_path(store):
    written = _tool_rows(store, "run-1", 40)
    stored = _raw_sql(store, "SELECT state_kind, length(node_input) FROM {t} ORDER BY seq")
    # both kinds of row carry references, and a reference costs far less than the arguments
    assert {kind for kind, _ in stored} == {"full", "delta"}
    assert max(size for _, size in stored) < 200
    listed = store.list("run-1")
    assert {cp.checkpoint_id: cp.node_input for cp in listed} == written
    for cp in listed:
        assert store.get_checkpoint("run-1", cp.checkpoint_id).node_input == cp.node_input
        before = store.get_last("run-1", before_seq=cp.seq + 1)
        assert before.node_input == written[cp.checkpoint_id]
    assert store.get_last("run-1").node_input == written[listed[-1].checkpoint_id]
    under = store.get_last("run-1", agent_path_prefix="agent:a", before_seq=listed[-1].seq)
    assert under.node_input == written[listed[-2].checkpoint_id]


def test_a_reference_the_rows_state_does_not_hold_is_a_corrupt_row(store):
    _tool_rows(store, "run-1", 3)
    last = store.get_last("run-1")
    bad = b'{"tool_call_id":"c","arguments":{"__tether__":"ref","v":["messages",99,"x"]}}'
    _raw_sql(
        store, "UPDATE {t} SET node_input = %s WHERE checkpoint_id = %s", (bad, last.checkpoint_id)
    )
    with pytest.raises(CorruptRecordError, match=last.checkpoint_id) as caught:
        store.get_checkpoint("run-1", last.checkpoint_id)
    assert caught.value.execution_id == "run-1" and caught.value.node_id == last.node_id
    with pytest.raises(CorruptRecordError, match=last.checkpoint_id):
        store.list("run-1")
    with pytest.raises(CorruptRecordError, match=last.checkpoint_id):
        store.get_last("run-1")


# --- compressed state payloads ------------------------------------------------------------


_PROSE = (
    "The reviewer read the refund request, checked the order history and the carrier's "
    "tracking page, and asked the customer for a photo of the damaged parcel. "
)


def test_a_state_payload_is_compressed_from_the_threshold_on_when_that_saves_a_tenth():
    payload = orjson.dumps({"notes": _PROSE * 8})
    packed = _compression.compress_state(payload, 512)
    assert packed[:1] == _compression.ZSTD_MARK and len(packed) * 2 < len(payload)
    assert _replay.apply_row({}, "full", packed) == orjson.loads(payload)
    short = payload[:511]
    assert _compression.compress_state(short, 512) is short  # under the threshold
    assert _compression.compress_state(payload, None) is payload  # compression off
    noise = b"{" + random.Random(7).randbytes(700)  # deflate cannot shrink it by a tenth
    assert _compression.compress_state(noise, 512) is noise


def test_a_delta_payload_is_compressed_only_from_16_kb_and_applies_like_the_plain_one():
    keys = _keys({"log": [_PROSE * 3]})
    _, full, head = _delta.encode_state(None, keys)
    start = _replay.apply_row({}, "full", full)
    for size, compressed in ((5, False), (110, True)):  # ~0.8 KB and ~17 KB of messages
        grown = _keys({"log": [_PROSE * 3, _PROSE * size]})
        kind, delta, _ = _delta.encode_state(head, grown)
        assert kind == "delta"
        assert (len(delta) >= _compression.DELTA_COMPRESS_MIN_BYTES) is compressed
        packed = _compression.compress_state(delta, 512, delta=True)
        assert (packed[:1] == _compression.ZSTD_MARK) is compressed
        assert _compression.compress_state(delta, 512)[:1] == _compression.ZSTD_MARK  # as full
        assert _replay.apply_row(start, "delta", packed) == _replay.apply_row(start, "delta", delta)


_ZSTD_FRAME = zstandard.ZstdCompressor().compress(b'{"k": "' + b"v" * 600 + b'"}')


@pytest.mark.parametrize(
    "payload",
    [
        b"\x28\xb5\x2f\xfd" + b"\x00" * 40,  # the magic number, then no valid frame
        b"(not a frame",
        _ZSTD_FRAME[:-6],  # a frame cut short
        _ZSTD_FRAME + b"trailing bytes",
        _ZSTD_FRAME + _ZSTD_FRAME,
    ],
)
def test_a_payload_that_claims_zstandard_and_is_not_is_a_corrupt_record(payload):
    with pytest.raises(CorruptRecordError, match="Zstandard"):
        _replay.apply_row({}, "full", payload)


def test_compressed_json_that_is_not_an_object_is_a_corrupt_record():
    frame = zstandard.ZstdCompressor().compress(b"[" + b"1, 2, 3, " * 100 + b"4]")
    with pytest.raises(CorruptRecordError, match="not a JSON object"):
        _replay.apply_row({}, "full", frame)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "512"])
def test_compress_state_min_bytes_must_be_a_positive_integer_or_none(bad, tmp_path):
    from tether import ConfigurationError, SQLiteCheckpointer

    with pytest.raises(ConfigurationError, match="compress_state_min_bytes"):
        SQLiteCheckpointer(tmp_path / "t.db", compress_state_min_bytes=bad)
    with pytest.raises(ConfigurationError, match="compress_state_min_bytes"):
        from tether.store.postgres import PostgresCheckpointer

        PostgresCheckpointer("postgresql://nobody@127.0.0.1:1/none", compress_state_min_bytes=bad)


def _reopen(store, **options):
    """Another checkpointer on the same database as ``store``."""
    if hasattr(store, "schema"):
        from tests.conftest import PG_DSN
        from tether.store.postgres import PostgresCheckpointer

        return PostgresCheckpointer(PG_DSN, schema=store.schema, **options)
    from tether import SQLiteCheckpointer

    return SQLiteCheckpointer(store.path, **options)


def _put_note(store, eid: str, notes: list[str], n: int) -> None:
    store.put(
        Checkpoint(
            execution_id=eid,
            node_id=f"n{n}",
            step_type="node",
            status="completed",
            state_snapshot={"notes": notes, "n": n},
        )
    )


def test_large_state_rows_are_stored_compressed_and_read_back_exactly(store):
    """A full snapshot from 512 bytes is compressed; a delta only from 16 KB (a 1 KB message
    stays plain JSON: every resume replays it, and reading a frame costs 4x parsing it)."""
    eid = "run-z"
    store.create_run(RunRecord(eid, "chain-z", "chain"))
    notes: list[str] = []
    for n in range(6):
        notes = [*notes, f"{n}: " + _PROSE * (110 if n % 2 else n % 3 + 4)]
        _put_note(store, eid, notes, n)
    _put_note(store, eid, [*notes], 6)  # a delta of a few bytes stays plain JSON
    stored = _raw_sql(store, "SELECT seq, state_kind, state FROM {t} ORDER BY seq")
    marks = [(kind, bytes(state[:1])) for _, kind, state in stored]
    assert marks[:6] == [("full", b"(")] + [("delta", b"("), ("delta", b"{")] * 2 + [
        ("delta", b"(")
    ]
    assert marks[6] == ("delta", b"{")
    plain = sum(len(orjson.dumps(note)) for note in notes)
    assert sum(len(state) for _, _, state in stored) * 3 < plain  # prose: well under a third
    rows = store.list(eid)
    assert [cp.state_snapshot["notes"] for cp in rows] == [notes[: i + 1] for i in range(6)] + [
        notes
    ]
    assert store.get_last(eid).state_snapshot == {"notes": notes, "n": 6}
    third = rows[2]
    assert store.get_checkpoint(eid, third.checkpoint_id).state_snapshot == third.state_snapshot


def test_a_store_with_compression_off_writes_plain_json_and_reads_compressed_rows(store):
    eid = "run-mixed"
    store.create_run(RunRecord(eid, "chain-z", "chain"))
    notes = [_PROSE * 4]
    _put_note(store, eid, notes, 0)
    plain_store = _reopen(store, compress_state_min_bytes=None)
    try:
        notes = [*notes, _PROSE * 5]
        _put_note(plain_store, eid, notes, 1)
        assert plain_store.get_last(eid).state_snapshot == {"notes": notes, "n": 1}
        assert [cp.state_snapshot["notes"] for cp in plain_store.list(eid)] == [notes[:1], notes]
    finally:
        plain_store.close()
    stored = _raw_sql(store, "SELECT state FROM {t} ORDER BY seq")
    assert [bytes(state[:1]) for (state,) in stored] == [b"(", b"{"]


def test_rows_with_small_compressed_deltas_as_an_earlier_tether_wrote_them_still_load(store):
    """Until 16 KB became the deltas' threshold, tether compressed every payload from 512
    bytes: a run whose 1 KB message deltas are Zstandard frames (rewritten so here) loads
    row by row, at its newest row and at its resume point, and a resumed writer continues it
    with plain deltas."""
    eid = "run-old-deltas"
    store.create_run(RunRecord(eid, "chain-z", "chain"))
    notes: list[str] = []
    for n in range(5):
        notes = [*notes, f"{n}: " + _PROSE * 6]
        _put_note(store, eid, notes, n)
    deltas = "SELECT seq, state FROM {t} WHERE execution_id = %s AND state_kind = 'delta'"
    for seq, state in _raw_sql(store, deltas, (eid,)):
        frame = _compression.compress_state(bytes(state), 512)  # the earlier rule
        assert frame[:1] == _compression.ZSTD_MARK
        update = "UPDATE {t} SET state = %s WHERE execution_id = %s AND seq = %s"
        _raw_sql(store, update, (frame, eid, seq))
    old = _reopen(store)
    try:
        assert [cp.state_snapshot["notes"] for cp in old.list(eid)] == [
            notes[: i + 1] for i in range(5)
        ]
        cp, ended = old.get_resumable(eid)
        assert cp is not None and ended is None and cp.state_snapshot == {"notes": notes, "n": 4}
        notes = [*notes, "5: the newest"]
        _put_note(old, eid, notes, 5)
        assert old.get_last(eid).state_snapshot == {"notes": notes, "n": 5}
    finally:
        old.close()
    stored = _raw_sql(store, "SELECT state FROM {t} WHERE execution_id = %s ORDER BY seq", (eid,))
    assert [bytes(state[:1]) for (state,) in stored] == [b"("] * 5 + [b"{"]


def _chain_rows(*deltas: bytes) -> list[tuple[int, str, bytes]]:
    full = (1, "full", b'{"log":["a"],"n":1}')
    return [full, *((i + 2, "delta", d) for i, d in enumerate(deltas))]


def test_replaying_appends_in_place_matches_applying_each_row():
    rows = _chain_rows(
        b'{"a":{"log":["b"]}}',
        _compression.compress_state(orjson.dumps({"a": {"log": ["c" * 900]}}), 512),
        b'{"s":{"n":2},"a":{"log":["d"]}}',
        b'{"d":["n"]}',
        b'{"a":{"log":[]}}',
    )
    one_by_one: dict = {}
    for _, kind, payload in rows:
        one_by_one = _replay.apply_row(one_by_one, kind, payload)
    assert _replay.replay_state(rows, "run") == one_by_one == {"log": ["a", "b", "c" * 900, "d"]}


@pytest.mark.parametrize(
    "delta",
    [
        b'{"a":{"log":["x"],"n":["y"]}}',  # a second key after the first array
        b'{"a":{"log":["x"]},"s":{"k":[1]}}',  # another part after the appends
        b'{"a":{"log":[1],"log":[2]}}',  # a repeated key: the last one counts
        b'{"a":{"log":[]}}',
        b'{"a":{"log":[ ]}}',  # empty, with JSON's whitespace (a row edited by hand)
        b'{"a":{"log":[\n\t]}}',
        b'{"a":{"log":[ "x" , "y" ]}}',
        b'{"a":{"log":["]}}"]}}',  # the closing bytes inside a string
        b'{"a":{"lo":["x"]},"a":{"log":["y"]}}',
        b'{"a":{"log":[1, 2]}}',
        b'{"s":{"log":["z"]},"a":{"log":["y"]}}',
        b"{}",
    ],
)
def test_a_replayed_row_means_what_its_json_says_whatever_its_bytes_look_like(delta):
    """The replay tells a row that only appends to one list by its bytes: rows that look
    alike but are not one, or say more, are applied as their JSON reads."""
    rows = [(1, "full", b'{"log":["a"],"lo":[],"n":[0]}'), (2, "delta", b'{"a":{"log":["b"]}}')]
    rows += [(3, "delta", delta), (4, "delta", b'{"a":{"log":["c"]}}')]
    one_by_one: dict = {}
    for _, kind, payload in rows:
        one_by_one = _replay.apply_row(one_by_one, kind, payload)
    tracks: _replay.Tracks = {}
    raw = _replay.replay_in_place("run", {}, rows, tracks)
    assert raw == one_by_one
    head = _replay.head_from_raw(4, 1, raw, 3, tracks)
    assert {k: orjson.loads(_delta._as_bytes(v)) for k, v in head.keys.items()} == raw


def test_a_resumed_history_is_not_encoded_again_and_its_next_row_appends_one_item():
    """The head after a replay holds the grown list as the arrays stored (joined only for a
    full snapshot), also across the copy a resume replays the newest rows on."""
    rows = [(1, "full", b'{"log":["m0"],"n":1}')]
    rows += [(i, "delta", b'{"a":{"log":["m%d%s"]}}' % (i, b"-" * 99)) for i in range(2, 40)]
    rows += [(40, "delta", b"{}")]
    tracks: _replay.Tracks = {}
    at_target = _replay.replay_in_place("run", {}, rows[:-1], tracks)
    raw = _replay.replay_in_place("run", _replay.copy_raw(at_target, tracks), rows[-1:], tracks)
    head = _replay.head_from_raw(40, 1, raw, 39, tracks)
    grown = head.keys["log"]
    assert isinstance(grown, _delta.Chunks) and grown.join() == orjson.dumps(raw["log"])
    state = _replay.decode_state(raw)
    kind, payload, _ = _delta.encode_next(head, {**state, "log": [*state["log"], "new"]})
    assert (kind, payload) == ("delta", b'{"a":{"log":["new"]}}')
    # A list replaced by another row is encoded from what the state holds
    rows += [(41, "delta", b'{"s":{"log":["z"]}}'), (42, "delta", b'{"a":{"log":["y"]}}')]
    tracks = {}
    raw = _replay.replay_in_place("run", {}, rows, tracks)
    head = _replay.head_from_raw(42, 1, raw, 41, tracks)
    assert _delta._as_bytes(head.keys["log"]) == b'["z","y"]'


def test_a_replayed_history_keeps_the_rows_it_read_whole_and_grows_and_joins_from_them():
    """A resume keeps each append row as read (no copy of its array a row), and the head's
    list built from them joins, grows and branches off as one built step by step."""
    rows = [(1, "full", b'{"log":["m0"],"n":1}')]
    rows += [(i, "delta", b'{"a":{"log":["m%d","x%d"]}}' % (i, i)) for i in range(2, 30)]
    rows += [(30, "delta", b'{"a":{"log":[]}}'), (31, "delta", b'{"a":{"log":["last"]}}')]
    tracks: _replay.Tracks = {}
    raw = _replay.replay_in_place("run", {}, rows, tracks)
    grown = _replay.head_from_raw(31, 1, raw, 30, tracks).keys["log"]
    kept = [row for row in rows[1:] if row[0] != 30]  # the empty append adds nothing
    assert isinstance(grown, _delta.Chunks) and grown.framed == len(kept) == 29
    assert all(part is row[2] for part, row in zip(grown.parts[1:], kept, strict=True))
    assert grown.join() == orjson.dumps(raw["log"])
    frame = len(b'{"a":{"log":}}')
    assert grown.nbytes == len(b'["m0"]') + sum(len(r[2]) - frame for r in kept)
    longer = grown.grow(b'["n1"]').grow(b'["n2","n3"]')
    assert longer.join() == orjson.dumps([*raw["log"], "n1", "n2", "n3"])
    branch = grown.grow(b'["other"]')  # from the older value: branches off
    assert branch.join() == orjson.dumps([*raw["log"], "other"])
    assert longer.join() == orjson.dumps([*raw["log"], "n1", "n2", "n3"])
    assert grown.join() == orjson.dumps(raw["log"])


@pytest.mark.parametrize(
    ("delta", "error"),
    [
        (b'{"a":{"n":["x"]}}', "append to state key 'n', which is not a list"),
        (b'{"a":{"log":"x"}}', "append to state key 'log' of str"),
        (b'{"a":{"log":["x"]', "not valid JSON"),
        (b'{"a":{"nope":["x"]}}', "append to state key 'nope', which is not a list"),
    ],
)
def test_a_delta_that_does_not_fit_its_state_is_a_corrupt_record_naming_the_row(delta, error):
    with pytest.raises(CorruptRecordError, match=error) as caught:
        _replay.replay_state(_chain_rows(b'{"a":{"log":["b"]}}', delta), "run-x")
    assert "run 'run-x', seq 3" in caught.value.message


# --- rows written by an earlier tether ------------------------------------------------------

OLD_ROWS = Path(__file__).parent / "fixtures" / "rows_4cf2688.json"


def _old_message(i: int) -> str:
    return f"message {i:04d} " + "abcdefgh" * (i % 4)


def _old_state(i: int) -> dict:
    return {"log": [_old_message(j) for j in range(i + 1)], "turn": i}


def test_rows_written_by_an_earlier_tether_load_and_a_new_writer_continues_them(store_and_url):
    """The fixture's payloads were written by tether at 4cf2688, before issue 17 (full
    snapshots at least every 512 rows, the tail found by a full identity scan): each row's
    state, the latest state, the resume point and a row written after them read back."""
    store, url = store_and_url
    old = orjson.loads(OLD_ROWS.read_bytes())["rows"]
    assert {r["kind"] for r in old if r["seq"] > 1} == {"full", "delta"}
    assert any(base64.b64decode(r["state"])[:1] == _compression.ZSTD_MARK for r in old)
    store.create_run(RunRecord("old-run", "c", "chain"))
    log: list = []
    for i in range(len(old)):  # rows with every other column, whose state is then replaced
        log = [*log, _old_message(i)]
        store.put(
            Checkpoint(
                execution_id="old-run",
                node_id=f"n{i}",
                step_type="node",
                status="completed",
                state_snapshot={"log": log, "turn": i},
            )
        )
    values = ", ".join(["(%s, %s, %s, %s)"] * len(old))
    params = tuple(
        x for r in old for x in (r["seq"], r["kind"], base64.b64decode(r["state"]), r["base_seq"])
    )
    _raw_sql(
        store,
        "UPDATE {t} SET state_kind = v.column2, state = v.column3, base_seq = v.column4 "
        f"FROM (VALUES {values}) AS v WHERE execution_id = 'old-run' AND seq = v.column1",
        params,
    )
    stored = _raw_sql(store, "SELECT seq, state_kind, base_seq FROM {t} ORDER BY seq")
    assert stored == [(r["seq"], r["kind"], r["base_seq"]) for r in old]

    fresh = tether.connect(url)  # no writer head: everything is read from the old rows
    try:
        assert last_row(fresh, "old-run").state_snapshot == _old_state(len(old) - 1)
        assert [cp.state_snapshot for cp in fresh.list("old-run")] == [
            _old_state(i) for i in range(len(old))
        ]
        resumable = tether.latest_resumable(fresh, "old-run")
        assert resumable is not None and resumable.state_snapshot == _old_state(599)
        state = _old_state(600)
        fresh.put(
            Checkpoint(
                execution_id="old-run",
                node_id="n600",
                step_type="node",
                status="completed",
                state_snapshot=state,
            )
        )
    finally:
        fresh.close()
    again = tether.connect(url)
    try:
        assert last_row(again, "old-run").state_snapshot == state
    finally:
        again.close()


def test_a_long_list_grown_step_by_step_still_catches_a_replaced_old_item_and_an_older_head():
    log = [f"m{i}" for i in range(3000)]
    _, _, first = _delta.encode_next(None, {"log": log})
    head = first
    for i in range(3000, 3005):
        log = [*log, f"m{i}"]
        kind, payload, head = _delta.encode_next(head, {"log": log})
        assert kind == "delta" and payload == b'{"a":{"log":["m%d"]}}' % i
    edited = [*log[:1200], "redacted", *log[1201:], "m3005"]
    _, payload, _ = _delta.encode_next(head, {"log": edited})
    assert orjson.loads(payload) == {"s": {"log": edited}}
    # The first head's mark handed its copy on; encoding after it again (a retry) is still
    # right, by the byte comparison.
    retried = [*log[:3000], "other"]
    _, payload, _ = _delta.encode_next(first, {"log": retried})
    assert orjson.loads(payload) == {"a": {"log": ["other"]}}


# --- a grown list: only what is really appended is stored as an append ----------------------


def _grown_then(head: _delta.Head, log: list[str], edit) -> tuple[list[str], bytes]:
    """Edit ``log`` in place (the same list object the previous row encoded), append one item
    and encode it after ``head``: what a node that changes its state's list in place does."""
    edit(log)
    log.append("new")
    return log, _delta.encode_next(head, {"log": log})[1]


@pytest.mark.parametrize("length", [40, 20_000])
@pytest.mark.parametrize(
    "edit",
    [
        lambda log: log.__setitem__(3, "replaced"),  # an earlier item replaced in place
        lambda log: log.reverse(),  # reordered
        lambda log: log.sort(key=len, reverse=True),  # reordered by sort (stable: a no-op?)
        lambda log: log.insert(5, "inserted"),  # an item inserted before the end
        lambda log: log.__delitem__(slice(10, 12)),  # truncated in the middle
        lambda log: log.pop(0),  # the first item removed
        lambda log: log.__setitem__(slice(None), [*log[1:], log[0]]),  # rotated
    ],
    ids=["replaced", "reversed", "sorted", "inserted", "cut", "popped", "rotated"],
)
def test_a_list_changed_in_place_before_an_append_is_stored_whole(length, edit):
    log = [f"m{i:06d}" + "x" * (i % 7) for i in range(length)]
    _, _, head = _delta.encode_next(None, {"log": log})
    for i in range(3):  # the same list object, appended to in place: stored as appends
        log.append(f"a{i}")
        kind, payload, head = _delta.encode_next(head, {"log": log})
        assert kind == "delta" and orjson.loads(payload) == {"a": {"log": [f"a{i}"]}}
    before = list(log)
    log, payload = _grown_then(head, log, edit)
    if log[: len(before)] == before:  # the edit changed nothing (a sort already in order)
        assert orjson.loads(payload) == {"a": {"log": ["new"]}}
    else:
        assert orjson.loads(payload) == {"s": {"log": log}}


@pytest.mark.parametrize("length", [40, 20_000])
def test_a_truncated_or_emptied_list_is_stored_whole(length):
    log = [f"m{i}" for i in range(length)]
    _, _, head = _delta.encode_next(None, {"log": log})
    for shorter in (log[:-1], log[: length // 2], []):
        _, payload, _ = _delta.encode_next(head, {"log": shorter})
        assert orjson.loads(payload) == {"s": {"log": shorter}}
    log.clear()  # in place
    _, payload, _ = _delta.encode_next(head, {"log": log})
    assert orjson.loads(payload) == {"s": {"log": []}}


def test_a_head_whose_next_row_was_not_written_still_finds_the_append_after_it():
    """Encoding a changed list and dropping the row (its insert failed, or the step failed)
    leaves the head as it was: the next row encoded after it still stores only the append."""
    log = [f"m{i}" for i in range(5000)]
    _, _, head = _delta.encode_next(None, {"log": log})
    edited = [*log[:100], "edited", *log[101:], "new"]
    assert orjson.loads(_delta.encode_next(head, {"log": edited})[1]) == {"s": {"log": edited}}
    with pytest.raises(tether.SerializationError):  # a new item JSON cannot store
        _delta.encode_next(head, {"log": [*log, "\ud800"]})
    kind, payload, head = _delta.encode_next(head, {"log": [*log, "m5000"]})
    assert kind == "delta" and payload == b'{"a":{"log":["m5000"]}}'
    assert head.sources["log"].length == len(head.sources["log"].whole) == 5001


def test_lists_changed_in_place_read_back_as_they_were_at_every_row(tmp_path: Path):
    """Through a chain on a real SQLite file: nodes that append, replace an older item in
    place, reorder, cut and empty their state's list; every row, read back by a fresh
    checkpointer, holds the list exactly as the node left it."""
    from tether import Chain, SQLiteCheckpointer

    seen: list[list[str]] = []

    def node(change):
        def fn(state):
            log = state["log"]
            change(log)
            seen.append(list(log))
            return {"log": log}

        return fn

    changes = [
        lambda log: log.extend(f"m{i}" for i in range(3000)),
        lambda log: log.append("a"),
        lambda log: log.__setitem__(17, "replaced in place"),
        lambda log: log.append("b"),
        lambda log: (log.reverse(), log.append("c")),
        lambda log: log.append("d"),
        lambda log: (log.__delitem__(slice(5, 2000)), log.append("e")),
        lambda log: log.append("f"),
        lambda log: log.clear(),
        lambda log: log.append("g"),
    ]
    db = tmp_path / "tether.db"
    chain = Chain("edits", SQLiteCheckpointer(db))
    for i, change in enumerate(changes):
        chain.add_node(f"n{i}", node(change))
        if i:
            chain.add_edge(f"n{i - 1}", f"n{i}")
    result = chain.run({"log": []})
    assert result.status == "completed"
    fresh = SQLiteCheckpointer(db)
    try:
        rows = [cp for cp in fresh.list(result.execution_id) if cp.step_type == "node"]
        rows.sort(key=lambda cp: cp.seq)
        assert [cp.state_snapshot["log"] for cp in rows] == seen
    finally:
        fresh.close()


@pytest.mark.parametrize(
    ("value", "why"),
    [(2**63, "64-bit"), (2**64 - 1, "64-bit"), (-(2**63) - 1, "64-bit"), ("\ud800", "surrogate")],
)
def test_a_scalar_state_value_json_cannot_hold_is_refused_naming_its_key(value, why):
    _, _, head = _delta.encode_next(None, {"n": 1, "s": "a"})
    for before in (None, head):
        with pytest.raises(tether.SerializationError, match=why) as caught:
            _delta.encode_next(before, {"n": 1, "bad": value})
        assert caught.value.path == 'state["bad"]'
    assert _delta.encode_next(head, {"n": 2**63 - 1, "s": "b"})[1] == (
        b'{"s":{"n":9223372036854775807,"s":"b"}}'
    )


# --- a state chain with rows missing ---------------------------------------------------------


@pytest.mark.parametrize(
    ("deleted", "error"),
    [
        ("seq = 1", "run 'gap': the full snapshot at seq 1 that its rows up to seq"),
        ("seq = 5", "run 'gap': rows are missing from its state chain at seq 5$"),
        ("seq IN (3, 4, 6)", "run 'gap': rows are missing from its state chain at seq 3 to [46]"),
    ],
    ids=["snapshot", "one-delta", "deltas"],
)
def test_a_state_chain_with_a_row_deleted_is_a_corrupt_record_naming_the_seqs(
    store_and_url, deleted, error
):
    """A deleted delta row once replayed into a state without its append, handed back by
    every read path as if whole; a deleted snapshot was refused naming neither run nor seq."""
    store, url = store_and_url
    store.create_run(RunRecord("gap", "c", "chain"))
    log: list[str] = []
    for i in range(8):
        log = [*log, f"message {i}"]
        store.put(Checkpoint("gap", f"n{i}", "node", "completed", {"log": log}))
    assert _raw_sql(store, "SELECT count(*) FROM {t} WHERE state_kind = 'full'") == [(1,)]
    _raw_sql(store, f"DELETE FROM {{t}} WHERE execution_id = 'gap' AND {deleted}")
    fresh = tether.connect(url)  # no writer head: every read goes to the rows
    try:
        reads = [
            lambda: fresh.list("gap"),
            lambda: fresh.get_last("gap"),
            lambda: tether.latest_resumable(fresh, "gap"),
        ]
        for read in reads:
            with pytest.raises(CorruptRecordError, match=error):
                read()
    finally:
        fresh.close()


def test_a_damaged_idempotent_result_is_a_corrupt_record_naming_the_run_and_the_key(store):
    store.create_run(RunRecord("cached", "c", "chain"))
    store.put_idempotent("cached", "key-1", {"charged": 900})
    _raw_sql(
        store, "UPDATE {t} SET value = %s WHERE key = 'key-1'", (b"\xff{",), "idempotency_cache"
    )
    error = "run 'cached': the stored result of @idempotent key 'key-1' is damaged: stored data"
    for read in (
        lambda: store.get_idempotent("cached", "key-1"),
        lambda: store.list_idempotent("cached"),
        lambda: store.put_idempotent("cached", "key-1", {"charged": 900}),  # finds the old row
    ):
        with pytest.raises(CorruptRecordError, match=error):
            read()


@pytest.mark.parametrize(
    ("stored", "readable"),
    [
        ('{"a":{"log":["b"]}}', True),  # JSON as TEXT: what SQLite's shell stores for a literal
        ("garbage", False),
        (7, False),
    ],
)
def test_a_delta_row_stored_as_text_or_a_number_is_read_or_refused_naming_the_row(
    store, stored, readable
):
    """A delta's state rewritten by hand with another SQL type (SQLite keeps any type in any
    column): JSON text replays as its bytes would; anything else is a corrupt record naming
    the run and the seq, on the resume and listing paths, never a TypeError."""
    if hasattr(store, "schema"):
        pytest.skip("Postgres' bytea column holds bytes only: no other SQL type to store")
    eid = "run-typed"
    store.create_run(RunRecord(eid, "chain-t", "chain"))
    for n, log in enumerate([["a"], ["a", "b"], ["a", "b", "c"]]):
        store.put(Checkpoint(eid, f"n{n}", "node", "completed", {"log": log}))
    select = "SELECT seq, state_kind FROM {t} WHERE execution_id = %s ORDER BY seq"
    kinds = _raw_sql(store, select, (eid,))
    assert [k for _, k in kinds] == ["full", "delta", "delta"]
    update = "UPDATE {t} SET state = %s WHERE execution_id = %s AND seq = %s"
    _raw_sql(store, update, (stored, eid, kinds[1][0]))
    fresh = _reopen(store)
    try:
        if readable:
            cp, _ = fresh.get_resumable(eid)
            assert cp is not None and cp.state_snapshot == {"log": ["a", "b", "c"]}
            assert [c.state_snapshot["log"] for c in fresh.list(eid)][-1] == ["a", "b", "c"]
            return
        for read in (lambda: fresh.get_resumable(eid), lambda: fresh.list(eid)):
            with pytest.raises(CorruptRecordError) as info:
                read()
            assert eid in info.value.message and f"seq {kinds[1][0]}" in info.value.message
    finally:
        fresh.close()
