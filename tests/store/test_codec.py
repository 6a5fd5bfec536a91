"""The shared delta codec and the writer's head cache."""

from __future__ import annotations

from tether.store import _codec


def _head(seq: int) -> _codec.Head:
    return _codec.Head(seq, 1, {"k": b"1"}, seq - 1, 0)


def test_head_cache_never_moves_back():
    cache = _codec.HeadCache()
    cache.set("run", _head(4))
    cache.set("run", _head(3))  # a reader that loaded an older row, late
    assert cache.get("run").seq == 4
    cache.drop("run")
    cache.set("run", _head(3))
    assert cache.get("run").seq == 3


def test_append_is_found_by_bytes_and_replayed():
    keys1 = _codec.encode_keys({"log": ["a"], "n": 1})
    kind, payload, head = _codec.encode_state(None, keys1)
    assert kind == "full"
    keys2 = _codec.encode_keys({"log": ["a", "b"], "n": 1})
    kind2, payload2, _head2 = _codec.encode_state(head, keys2)
    assert kind2 == "delta" and payload2 == b'{"a":{"log":["b"]}}'
    raw = _codec.replay_state([(1, kind, payload), (2, kind2, payload2)])
    assert raw == {"log": ["a", "b"], "n": 1}


def test_deleted_and_replaced_keys():
    _, p1, h1 = _codec.encode_state(None, _codec.encode_keys({"a": [1, 2], "b": 1}))
    _, p2, _ = _codec.encode_state(h1, _codec.encode_keys({"a": [2]}))
    assert _codec.replay_state([(1, "full", p1), (2, "delta", p2)]) == {"a": [2]}


def test_encode_next_appends_only_the_new_tail_of_a_grown_list():
    log = ["a" * 10]
    _, _, h1 = _codec.encode_next(None, {"log": log, "n": 1})
    grown = [*log, "b"]
    kind, payload, h2 = _codec.encode_next(h1, {"log": grown, "n": 1})
    assert kind == "delta" and payload == b'{"a":{"log":["b"]}}'
    # in-place mutation of an earlier item is still caught (identity differs -> full compare)
    changed = ["z", "b"]
    _, payload3, _h3 = _codec.encode_next(h2, {"log": changed, "n": 1})
    assert payload3 == b'{"s":{"log":["z","b"]}}'
    raw = _codec.replay_state(
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
    head, log = None, []
    for i in range(200):
        log = [*log, items[i]]
        kind, payload, head = _codec.encode_next(head, {"log": log}, force_full=(i == 150))
        if i == 150:
            assert kind == "full" and orjson.loads(payload) == {"log": items[:151]}
    assert isinstance(head.keys["log"], _codec.Chunks)
    assert head.keys["log"].join() == orjson.dumps(items)


def test_mutable_items_never_take_the_identity_shortcut():
    row = {"x": 1}
    _, _, h1 = _codec.encode_next(None, {"rows": [row]})
    row["x"] = 2  # mutated in place: same object, different content
    _kind, payload, _ = _codec.encode_next(h1, {"rows": [row, {"y": 3}]})
    assert payload == b'{"s":{"rows":[{"x":2},{"y":3}]}}'


def test_frozen_dicts_take_the_identity_shortcut_and_read_back_as_dicts():
    from tether.serde import FrozenDict

    m1, m2 = FrozenDict(role="user", content="hi"), FrozenDict(role="assistant", content="yo")
    _, _, h1 = _codec.encode_next(None, {"messages": [m1]})
    kind, payload, _ = _codec.encode_next(h1, {"messages": [m1, m2]})
    assert payload == b'{"a":{"messages":[{"role":"assistant","content":"yo"}]}}'
    raw = _codec.replay_state(
        [(1, "full", b'{"messages":[{"role":"user","content":"hi"}]}'), (2, kind, payload)]
    )
    state = _codec.decode_state(raw)
    assert state == {"messages": [dict(m1), dict(m2)]}
    assert type(state["messages"][0]) is dict
