"""@tool: schema from the signature, descriptions from the docstring, validation before the call."""

from __future__ import annotations

import contextvars
import inspect
import re
from typing import Annotated, Literal

import pydantic
import pytest

from tether.agent.tool import Tool, ToolArgumentsError, parse_docstring, tool
from tether.errors import ConfigurationError, TetherError
from tether.llm import INVALID_JSON_KEY, ToolSpec


class Address(pydantic.BaseModel):
    street: str
    city: str = "Lisbon"


@tool
def ship(order_id: str, quantity: int, address: Address, express: bool = False) -> str:
    """Ship an order to an address.

    Ships with the default carrier; this paragraph is not part of the description.

    Args:
        order_id: the order, e.g. ``"A-1042"``.
        quantity (int): how many units,
            at least one.
        address: where to deliver.

    Returns:
        The tracking number.
    """
    return f"{order_id}:{quantity}:{address.city}:{express}"


def test_spec_is_built_from_signature_and_docstring() -> None:
    spec = ship.spec
    assert isinstance(spec, ToolSpec)
    assert spec.name == "ship"
    assert spec.description == "Ship an order to an address."
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "order_id": {"type": "string", "description": 'the order, e.g. ``"A-1042"``.'},
            "quantity": {"type": "integer", "description": "how many units, at least one."},
            "address": {"$ref": "#/$defs/Address", "description": "where to deliver."},
            "express": {"type": "boolean", "default": False},
        },
        "required": ["order_id", "quantity", "address"],
        "additionalProperties": False,
        "$defs": {
            "Address": {
                "type": "object",
                "properties": {
                    "street": {"type": "string"},
                    "city": {"type": "string", "default": "Lisbon"},
                },
                "required": ["street"],
            }
        },
    }


def test_decorated_function_stays_a_plain_callable_with_its_signature() -> None:
    assert isinstance(ship, Tool)
    assert ship("A", 2, Address(street="x")) == "A:2:Lisbon:False"
    assert ship.__name__ == "ship"
    assert ship.__doc__ is not None and ship.__doc__.startswith("Ship an order")
    assert list(inspect.signature(ship).parameters) == [
        "order_id",
        "quantity",
        "address",
        "express",
    ]


async def test_ainvoke_validates_and_coerces_the_models_arguments() -> None:
    result = await ship.ainvoke(
        {"order_id": "A-1", "quantity": "3", "address": {"street": "Rua 1", "city": "Porto"}}
    )
    assert result == "A-1:3:Porto:False"


async def test_bad_arguments_raise_tool_arguments_error_and_do_not_call() -> None:
    calls: list[int] = []

    @tool
    def count(n: int, mode: Literal["up", "down"] = "up") -> int:
        """Count."""
        calls.append(n)
        return n

    with pytest.raises(ToolArgumentsError) as caught:
        await count.ainvoke({"n": "many", "mode": "sideways", "extra": 1})
    error = caught.value
    assert isinstance(error, TetherError)
    assert error.tool_name == "count"
    assert "- n: Input should be a valid integer" in error.errors
    assert "- mode: Input should be 'up' or 'down' (got 'sideways')" in error.errors
    assert "- extra: unexpected argument" in error.errors
    assert "Call it again" in str(error)
    with pytest.raises(ToolArgumentsError, match="- n: Field required"):
        await count.ainvoke({})
    assert calls == []


async def test_arguments_that_were_not_json_are_reported_to_the_model() -> None:
    with pytest.raises(
        ToolArgumentsError, match=re.escape("not a JSON object: '{order_id: A'")
    ) as caught:
        await ship.ainvoke({INVALID_JSON_KEY: "{order_id: A"})
    assert caught.value.tool_name == "ship"


async def test_async_tools_are_awaited_and_defaults_come_from_the_function() -> None:
    seen: list[list[str]] = []

    @tool(name="search-docs", description="Search the docs.")
    async def search(query: str, tags: list[str] | None = None, limit: int = 3) -> list[str]:
        seen.append(tags if tags is not None else ["<default>"])
        return [f"{query}#{i}" for i in range(limit)]

    assert search.name == "search-docs"
    assert search.spec.description == "Search the docs."
    assert await search.ainvoke({"query": "q", "limit": 2}) == ["q#0", "q#1"]
    assert seen == [["<default>"]]
    assert await search("direct", limit=1) == ["direct#0"]


async def test_sync_tools_run_in_the_callers_context() -> None:
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")

    @tool
    def read_marker() -> str:
        """Read the marker."""
        return marker.get()

    marker.set("run-42")
    assert await read_marker.ainvoke({}) == "run-42"
    assert read_marker.spec.parameters == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }


async def test_errors_raised_by_the_tool_propagate_unchanged() -> None:
    @tool
    def fail(reason: str) -> None:
        raise KeyError(reason)

    with pytest.raises(KeyError, match="boom"):
        await fail.ainvoke({"reason": "boom"})


async def test_awkward_parameter_names_and_constraints_are_supported() -> None:
    @tool
    def awkward(
        json: str,
        model_config: int = 1,
        title: str = "t",
        _hidden: int = 0,
        size: Annotated[int, pydantic.Field(ge=1, le=10)] = 5,
    ) -> str:
        """Awkward names."""
        return f"{json}|{model_config}|{title}|{_hidden}|{size}"

    properties = awkward.spec.parameters["properties"]
    assert list(properties) == ["json", "model_config", "title", "_hidden", "size"]
    assert properties["size"] == {"type": "integer", "default": 5, "minimum": 1, "maximum": 10}
    assert await awkward.ainvoke({"json": "j", "title": "x", "_hidden": 2}) == "j|1|x|2|5"
    with pytest.raises(ToolArgumentsError, match="size"):
        await awkward.ainvoke({"json": "j", "size": 11})


async def test_positional_only_parameters_are_passed_positionally() -> None:
    @tool
    def pos(a: int, /, b: int = 2) -> int:
        """Positional."""
        return a * 10 + b

    assert await pos.ainvoke({"a": 4}) == 42


async def test_types_local_to_the_defining_function_are_resolved() -> None:
    class Point(pydantic.BaseModel):
        x: int
        y: int

    @tool
    def norm1(point: Point) -> int:
        """Manhattan norm."""
        return abs(point.x) + abs(point.y)

    assert await norm1.ainvoke({"point": {"x": 3, "y": -4}}) == 7


def test_unusable_signatures_fail_at_decoration_with_a_clear_error() -> None:
    def star(*names: str) -> None: ...

    def kwargs(**options: str) -> None: ...

    with pytest.raises(ConfigurationError, match=r"\*names cannot be described"):
        tool(star)
    with pytest.raises(ConfigurationError, match=r"\*options cannot be described"):
        tool(kwargs)
    with pytest.raises(ConfigurationError, match="not accepted by model providers"):
        tool(name="has space")(lambda: None)

    def unresolved(x: NotDefinedAnywhere) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(ConfigurationError, match="cannot resolve its type annotations"):
        tool(unresolved)

    class Opaque:
        pass

    def opaque(x: Opaque) -> None: ...

    with pytest.raises(ConfigurationError, match="pydantic cannot validate"):
        tool(opaque)


def test_docstring_parser_reads_google_style_sections() -> None:
    doc = inspect.cleandoc(
        """
        Summary line
        continues here.

        Details.

        Args:
            alpha (str): first
                and more.
            *beta: second.
            gamma: third: with colon.

        Raises:
            ValueError: not an argument.
        """
    )
    assert parse_docstring(doc) == (
        "Summary line continues here.",
        {"alpha": "first and more.", "beta": "second.", "gamma": "third: with colon."},
    )
    assert parse_docstring("") == ("", {})
    assert parse_docstring("Args:\n    x: only args.") == ("", {"x": "only args."})


def test_the_readme_one_line_docstring_describes_each_argument() -> None:
    @tool
    def refund(order_id: str, amount: int) -> str:
        """Refund an order. Args: order_id: the order. amount: in cents."""
        return f"refunded {amount} on {order_id}"

    spec = refund.spec
    assert spec.description == "Refund an order."
    assert spec.parameters["properties"] == {
        "order_id": {"type": "string", "description": "the order."},
        "amount": {"type": "integer", "description": "in cents."},
    }


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(
            """Refund an order.

            Args:
                order_id (str): the order,
                    as printed on the receipt.
                amount: in cents.

            Returns:
                A receipt.
            """,
            id="google",
        ),
        pytest.param(
            """Refund an order.

            Parameters
            ----------
            order_id : str
                the order,
                as printed on the receipt.
            amount : int
                in cents.

            Returns
            -------
            str
                A receipt.
            """,
            id="numpy",
        ),
        pytest.param(
            """Refund an order.

            :param order_id: the order,
                as printed on the receipt.
            :param int amount: in cents.
            :returns: A receipt.
            """,
            id="rest",
        ),
        pytest.param(
            """Refund an order.

            @param order_id: the order, as printed on the receipt.
            @param amount: in cents.
            @return: A receipt.
            """,
            id="epydoc",
        ),
        pytest.param(
            "Refund an order. Args: order_id (str): the order, as printed on the receipt. "
            "amount: in cents. Returns: A receipt.",
            id="one-line-with-types-and-returns",
        ),
        pytest.param(
            """Refund an order.
            Args: order_id: the order, as printed on the receipt. amount: in cents.
            """,
            id="inline-args-on-the-second-line",
        ),
    ],
)
def test_each_docstring_style_describes_the_arguments(doc: str) -> None:
    def refund(order_id: str, amount: int) -> str:
        return order_id

    refund.__doc__ = doc
    spec = tool(refund).spec
    assert spec.description == "Refund an order."
    properties = spec.parameters["properties"]
    assert properties["order_id"]["description"] == "the order, as printed on the receipt."
    assert properties["amount"]["description"] == "in cents."


def test_keyword_args_sections_describe_arguments_too() -> None:
    doc = "Search.\n\nArgs:\n    query: what to find.\n\nKeyword Args:\n    limit: at most."
    assert parse_docstring(doc) == ("Search.", {"query": "what to find.", "limit": "at most."})


def test_a_one_line_section_splits_only_at_the_functions_argument_names() -> None:
    doc = "Scale a value. Args: ratio: as n: m, e.g. 3: 1. value: the value."
    assert parse_docstring(doc, ["ratio", "value"]) == (
        "Scale a value.",
        {"ratio": "as n: m, e.g. 3: 1.", "value": "the value."},
    )


def test_a_docstring_without_arguments_keeps_its_summary_and_describes_none() -> None:
    assert parse_docstring("Look it up. Note: it is slow.", ["x"]) == (
        "Look it up. Note: it is slow.",
        {},
    )
    assert parse_docstring(":param x: only x.") == ("", {"x": "only x."})
    assert parse_docstring("Args: x: only x.", ["x"]) == ("", {"x": "only x."})
