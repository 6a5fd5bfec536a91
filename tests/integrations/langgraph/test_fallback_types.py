"""A value tether's JSON cannot hold goes to LangGraph's msgpack, whose strict allowlist reads
an unlisted class back as a plain dict. That must not happen silently: storing such a value is
refused with the class, where it sits and the fix; with the class allowed it comes back as
itself (docs/langgraph.md, "Stored values")."""

from __future__ import annotations

from typing import Any, TypedDict

import pydantic
import pytest
from langgraph.graph import START, StateGraph

from tether.errors import SerializationError
from tether.integrations.langgraph import TetherSaver, TetherSerializer


class Order(pydantic.BaseModel):
    id: str
    amount: int


class _S(TypedDict, total=False):
    x: Any


def _value() -> dict[str, Any]:
    # The tuple key keeps the whole value out of tether's JSON, so it all goes to msgpack.
    return {"order": Order(id="A-1", amount=900), "by_pair": {("eu", 1): "ok"}}


def _graph(saver: TetherSaver) -> Any:
    builder = StateGraph(_S)
    builder.add_node("n", lambda s: {"x": _value()})
    builder.add_edge(START, "n")
    return builder.compile(checkpointer=saver)


def test_a_class_the_msgpack_fallback_would_read_back_as_a_dict_is_refused_naming_it(store):
    graph = _graph(TetherSaver(store))
    with pytest.raises(SerializationError) as info:
        graph.invoke({}, {"configurable": {"thread_id": "fb-1"}})
    message = str(info.value)
    assert "Order" in message and "allowed_msgpack_modules" in message, message
    assert "order" in message  # where in the value it sits


def test_with_the_class_allowed_it_comes_back_as_itself(store):
    serde = TetherSerializer(allowed_msgpack_modules=[(__name__, "Order")])
    graph = _graph(TetherSaver(store, serde=serde))
    config = {"configurable": {"thread_id": "fb-2"}}
    graph.invoke({}, config)
    value = graph.get_state(config).values["x"]
    assert value == _value() and type(value["order"]) is Order


def test_values_the_fallback_keeps_whole_are_stored_as_before():
    serde = TetherSerializer()
    # (msgpack reads a tuple back as a list, as LangGraph's own savers do; that is not a loss of
    # class.)
    value = {("eu", 1): ["ok", 2.5, None, b"raw"], "n": [1, 2]}
    assert serde.loads_typed(serde.dumps_typed(value)) == value


def test_a_string_the_fallback_would_change_is_refused():
    serde = TetherSerializer()
    # A lone surrogate keeps the value out of tether's JSON; msgpack would store it as '?'.
    with pytest.raises(SerializationError) as info:
        serde.dumps_typed({("k", 1): "\ud800"})
    assert "back changed" in str(info.value), info.value
