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
    kind2, payload2, head2 = _codec.encode_state(head, keys2)
    assert kind2 == "delta" and payload2 == b'{"a":{"log":["b"]}}'
    raw = _codec.replay_state([(1, kind, payload), (2, kind2, payload2)])
    assert raw == {"log": ["a", "b"], "n": 1}


def test_deleted_and_replaced_keys():
    _, p1, h1 = _codec.encode_state(None, _codec.encode_keys({"a": [1, 2], "b": 1}))
    _, p2, _ = _codec.encode_state(h1, _codec.encode_keys({"a": [2]}))
    assert _codec.replay_state([(1, "full", p1), (2, "delta", p2)]) == {"a": [2]}
