"""Typed envelopes and path-naming errors (docs/design.md §7)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import re
import uuid
from decimal import Decimal

import pytest
from pydantic import BaseModel

from tests.support.results import question_of
from tether import Chain, SerializationError, interrupt, serde
from tether.errors import CorruptRecordError


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    when: dt.date


class Order(BaseModel):
    id: uuid.UUID
    total: Decimal
    point: Point | None = None


def test_common_types_round_trip_as_the_same_types():
    value = {
        "dt": dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC),
        "naive": dt.datetime(2026, 1, 1, 1, 1),
        "d": dt.date(2026, 11, 29),
        "t": dt.time(12, 30),
        "u": uuid.uuid4(),
        "dec": Decimal("10.005"),
        "b": b"\x00\x01\xff",
        "e": Color.RED,
        "dc": Point(1, dt.date(2020, 1, 1)),
        "pm": Order(
            id=uuid.UUID(int=1), total=Decimal("9.90"), point=Point(2, dt.date(2021, 2, 2))
        ),
        "tup": (1, "a"),
        "set": {3, 1, 2},
        "nested": [{"x": [Decimal("1")]}],
        "__tether__": "a user key that looks like ours",
    }
    back = serde.loads(serde.dumps(value))
    assert back == value
    assert type(back["pm"]) is Order and type(back["dc"]) is Point and back["e"] is Color.RED


def test_user_dict_shaped_like_an_envelope_is_not_mistaken():
    value = {"inner": {"__tether__": "uuid", "v": "not-a-uuid"}}
    assert serde.loads(serde.dumps(value)) == value


def test_unsupported_value_names_its_path():
    with pytest.raises(SerializationError) as info:
        serde.dumps({"order": {"items": [1, {"when": object()}]}}, "state")
    assert info.value.path == 'state["order"]["items"][1]["when"]'
    assert "builtins.object" in str(info.value)


def test_non_str_keys_and_huge_ints_are_refused():
    with pytest.raises(SerializationError, match=r'state\["m"\]\[1\]'):
        serde.dumps({"m": {1: "x"}}, "state")
    with pytest.raises(SerializationError, match="64-bit"):
        serde.dumps({"n": 2**70}, "state")


class _Ratio(float):
    pass


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), _Ratio("nan")])
def test_nan_and_infinity_are_refused_not_stored_as_null(bad):
    # orjson writes them as null: the run would read None back after a resume.
    for value, path in [
        ({"score": bad}, 'state["score"]'),
        ({"scores": [1.5, bad]}, 'state["scores"][1]'),
        (bad, "state"),
        ((bad,), "state[0]"),
    ]:
        with pytest.raises(SerializationError, match="JSON cannot hold") as info:
            serde.dumps(value, "state")
        assert info.value.path == path
    assert serde.loads(serde.dumps({"x": [0.5, -2.0, 1e300]})) == {"x": [0.5, -2.0, 1e300]}


def test_a_nan_in_state_fails_the_step_and_the_run_keeps_its_last_good_checkpoint(store):
    chain = Chain("nan", store)
    chain.add_node("a", lambda s: {"ok": 1})
    chain.add_node("b", lambda s: {"score": float("nan")})
    failed = chain.run({})
    assert failed.status == "failed" and isinstance(failed.error, SerializationError)
    assert failed.error.path == 'state["score"]'
    assert [c.node_id for c in store.list(failed.execution_id)] == ["a", "run_end"]


def test_decoding_never_imports_modules():
    data = b'{"__tether__":"dataclass","v":{"cls":"antigravity:Fly","fields":{}}}'
    with pytest.raises(CorruptRecordError, match="not imported"):
        serde.loads(data)
    bad = b'{"__tether__":"enum","v":{"cls":"os:system","value":"ls"}}'
    with pytest.raises(CorruptRecordError, match=r"not a enum class|not a class"):
        serde.loads(bad)


def test_bad_state_fails_before_commit_and_run_stays_resumable(store):
    chain = Chain("bad-state", store)
    calls = {"b": 0}
    chain.add_node("a", lambda s: {"a": 1})

    def b(state):
        calls["b"] += 1
        if calls["b"] == 1:
            return {"order": {"when": object()}}
        return {"order": {"when": dt.date(2026, 1, 1)}}

    chain.add_node("b", b)
    chain.add_edge("a", "b")
    failed = chain.run({})
    assert failed.status == "failed"
    assert isinstance(failed.error, SerializationError)
    assert failed.error.path == 'state["order"]["when"]'
    assert failed.error.node_id == "b"
    assert [c.node_id for c in store.list(failed.execution_id)] == ["a", "run_end"]
    done = chain.resume(failed.execution_id)
    assert done.output["order"]["when"] == dt.date(2026, 1, 1)


def test_bad_input_is_refused_before_a_run_exists(store):
    chain = Chain("bad-input", store)
    chain.add_node("a", lambda s: {})
    with pytest.raises(SerializationError, match=r'input\["x"\]'):
        chain.run({"x": object()})
    assert store.list_runs() == []


def test_lone_surrogates_are_a_serialization_error_not_a_driver_error(store):
    chain = Chain("surrogate", store)
    chain.add_node("a", lambda s: {"text": "\ud800"})
    result = chain.run({})
    assert result.status == "failed" and isinstance(result.error, SerializationError)
    assert result.error.path == 'state["text"]'
    with pytest.raises(SerializationError):
        chain.run({}, execution_id="bad-\udfff-id")
    assert [r.status for r in store.list_runs()] == ["failed"]


def _local_classes():
    class LocalModel(BaseModel):
        x: int

    @dataclasses.dataclass
    class LocalPoint:
        x: int

    class LocalColor(enum.Enum):
        RED = "red"

    return {"pydantic": LocalModel(x=1), "dataclass": LocalPoint(1), "enum": LocalColor.RED}


@pytest.mark.parametrize("kind", ["pydantic", "dataclass", "enum"])
def test_a_class_defined_inside_a_function_is_refused_naming_its_path_and_why(kind):
    value = {"order": {"items": [_local_classes()[kind]]}}
    with pytest.raises(SerializationError) as info:
        serde.dumps(value, "state")
    assert info.value.path == 'state["order"]["items"][0]'
    assert "<locals>" in info.value.type_name
    assert "defined inside a function" in str(info.value)
    # the same value inside a module-level dataclass is refused too, at its own path
    holder = Point(_local_classes()[kind], dt.date(2020, 1, 1))
    with pytest.raises(SerializationError, match="defined inside a function") as inner:
        serde.dumps({"p": holder}, "state")
    assert inner.value.path == 'state["p"]["x"]'


def test_a_class_its_module_does_not_name_is_refused():
    made = dataclasses.make_dataclass("Made", [("x", int)])
    made.__module__ = __name__  # claims to live here, where no ``Made`` is defined
    good = {"pm": Order(id=uuid.UUID(int=2), total=Decimal("1.5")), "e": Color.RED}
    for _ in range(2):  # the second time the per-type check comes from its cache
        with pytest.raises(SerializationError, match=r"is not what tests\.test_serde:Made names"):
            serde.dumps({"m": made(1)}, "state")
        assert serde.loads(serde.dumps(good)) == good

    class Point(BaseModel):  # shadows nothing at module level, but shares a name there
        y: int

    Point.__qualname__ = "Point"  # as if written at the top level
    with pytest.raises(SerializationError, match="is not what"):
        serde.dumps({"p": Point(y=1)}, "state")


def test_an_answer_holding_a_local_class_is_refused_before_it_is_claimed():
    from tether import Resume

    with pytest.raises(SerializationError, match="defined inside a function"):
        Resume(True, data={"edited": _local_classes()["dataclass"]})


def test_an_agent_tool_asking_with_an_unreadable_context_fails_the_run_clearly(store):
    from tether import Agent, Resume, interrupt
    from tether.agent import Tool
    from tether.testing import ScriptedLLM

    local = {"on": True}

    def ask(order_id: str) -> str:
        """Ask a human.

        Args:
            order_id: the order.
        """
        context = _local_classes()["pydantic"] if local["on"] else {"order_id": order_id}
        return str(interrupt("check", context).approved)

    call = {"name": "ask", "arguments": {"order_id": "A-1"}}
    agent = Agent(
        "asker",
        llm=ScriptedLLM([[call], "ok"], resume_aware=True),
        tools=[Tool(ask)],
        checkpointer=store,
    )
    failed = agent.run("go")
    assert failed.status == "failed" and isinstance(failed.error, SerializationError)
    assert failed.error.path == "interrupt context" and "inside a function" in str(failed.error)
    assert store.get_run(failed.execution_id).status == "failed"
    assert store.get_pending_interrupt(failed.execution_id) is None
    local["on"] = False
    paused = agent.resume(failed.execution_id)  # re-invokes the tool from its saved row
    assert question_of(paused)["context"] == {"order_id": "A-1"}
    assert agent.resume(failed.execution_id, Resume(True)).status == "completed"


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


def _cycle() -> dict[str, object]:
    value: dict[str, object] = {}
    value["self"] = value
    return value


@pytest.mark.parametrize(
    "make",
    [lambda: _nested(5000), _cycle, lambda: {"t": (_nested(5000),)}],
    ids=["deep-list", "cycle", "deep-tuple"],
)
def test_a_value_nested_past_the_recursion_limit_or_holding_itself_is_a_serialization_error(
    make,
):
    # Past Python's recursion limit the encoder raised a bare RecursionError, naming nothing.
    with pytest.raises(SerializationError, match="nested too deeply") as info:
        serde.dumps({"x": make()}, "state")
    assert info.value.path == "state"
    with pytest.raises(SerializationError, match="nested too deeply"):
        serde.canonical_dumps([make()])


@pytest.mark.parametrize("where", ["state", "context"])
def test_a_step_with_a_value_nested_past_the_recursion_limit_fails_and_the_run_resumes(
    store, where
):
    # The interrupt context's RecursionError escaped run() and left the run `running`.
    chain = Chain("deep", store)
    calls = {"b": 0}
    chain.add_node("a", lambda s: {"a": 1})

    def b(state):
        calls["b"] += 1
        value = _nested(5000) if calls["b"] == 1 else [1]
        if where == "context":
            return {"answer": interrupt("deep", {"value": value}).approved}
        return {"value": value}

    chain.add_node("b", b)
    failed = chain.run({})
    assert failed.status == "failed" and isinstance(failed.error, SerializationError)
    assert "nested too deeply" in str(failed.error)
    assert store.get_run(failed.execution_id).status == "failed"
    assert [c.node_id for c in store.list(failed.execution_id)] == ["a", "run_end"]
    again = chain.resume(failed.execution_id)
    assert again.status == ("paused" if where == "context" else "completed")


def test_frozenset_and_bytearray_come_back_as_themselves():
    # Before, they came back as a set and as bytes: a node that hashed the frozenset or
    # appended to the bytearray worked on the first run and raised after a resume.
    value = {"tags": frozenset({"b", "a"}), "buf": bytearray(b"\x00ab"), "s": {1}, "b": b"x"}
    back = serde.loads(serde.dumps(value))
    assert back == value
    assert [type(back[k]) for k in value] == [frozenset, bytearray, set, bytes]


def test_equal_values_of_set_and_frozenset_or_bytes_and_bytearray_hash_alike():
    # Idempotency keys hash the canonical bytes: equal arguments give one key, as before.
    assert serde.canonical_dumps({"x": frozenset({2, 1})}) == serde.canonical_dumps({"x": {1, 2}})
    assert serde.canonical_dumps([bytearray(b"ab")]) == serde.canonical_dumps([b"ab"])
    # ...and a user's dict that merely looks like such an envelope keeps its own bytes.
    mimic = {"__tether__": "frozenset", "v": [1]}
    assert serde.canonical_dumps(mimic) != serde.canonical_dumps({"__tether__": "set", "v": [1]})


def test_a_resumed_run_sees_the_types_the_first_run_saw(store):
    seen: list[tuple[type, type]] = []
    failed_once: list[bool] = []

    def b(state):
        seen.append((type(state["tags"]), type(state["buf"])))
        if not failed_once:
            failed_once.append(True)
            raise RuntimeError("crash after the first step")
        return {"buf": state["buf"] + bytearray(b"!"), "n": hash(state["tags"]) != 0}

    chain = Chain("types", store)
    chain.add_node("a", lambda s: {"tags": frozenset({"x"}), "buf": bytearray(b"ab")})
    chain.add_node("b", b)
    first = chain.run({})
    assert first.status == "failed"
    done = chain.resume(first.execution_id)
    assert done.status == "completed", done.error
    assert seen == [(frozenset, bytearray)] * 2
    assert done.output["buf"] == bytearray(b"ab!")


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"\xff", "not UTF-8 text (byte 0xff at position 0)"),
        (b'{"note": "caf\xe9"}', "not UTF-8 text (byte 0xe9 at position 13)"),
    ],
)
def test_parse_json_text_refuses_bytes_that_are_not_text_as_not_json(raw, said):
    with pytest.raises(json.JSONDecodeError, match=re.escape(said)):
        serde.parse_json_text(raw)
    assert serde.parse_json_text('{"note": "café"}'.encode()) == {"note": "café"}
