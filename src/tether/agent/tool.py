"""``@tool``: a typed Python function, described to the model and validated on the way in.

::

    @tool
    async def refund(order_id: str, amount_cents: int, reason: str = "") -> dict[str, str]:
        \"\"\"Refund part of an order.

        Args:
            order_id: the order to refund, e.g. ``"A-1042"``.
            amount_cents: how much to refund, in cents.
            reason: shown to the customer.
        \"\"\"

The model sees ``refund.spec``: the name, the docstring's first paragraph and a JSON schema
built from the signature with pydantic (per-argument descriptions come from the docstring's
Google ``Args:``, NumPy ``Parameters`` or reST ``:param:`` section, or from an ``Args:``
written inline, as in ``"Refund an order. Args: order_id: the order. amount: in cents."``).
``await refund.ainvoke({"order_id": "A-1042", "amount_cents": 500})`` validates the model's
arguments against that schema before the function runs; ``refund("A-1042", 500)`` is
still a plain call.
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
import sys
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, Generic, ParamSpec, TypeVar, overload

import docstring_parser
import pydantic
from docstring_parser import epydoc, google, numpydoc, rest

from tether.errors import ConfigurationError, TetherError
from tether.llm.messages import INVALID_JSON_KEY, ToolSpec

from .._context import current_run
from .._timeouts import bounded, check_timeout

P = ParamSpec("P")
R = TypeVar("R")

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SECTION_RE = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
_ARGS_WORDS = r"Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments"
_OTHER_WORDS = r"Returns?|Yields?|Raises"
_INLINE_ARGS_RE = re.compile(rf"(?:^|(?<=\s))(?:{_ARGS_WORDS}):\s+")
_INLINE_SECTION_RE = re.compile(rf"(?:^|(?<=\s))(?:{_ARGS_WORDS}|{_OTHER_WORDS}):(?:\s+|$)")
_GOOGLE = google.GoogleParser(
    sections=[
        *google.DEFAULT_SECTIONS,
        *(
            google.Section(title, "param", google.SectionType.MULTIPLE)
            for title in ("Keyword Args", "Keyword Arguments", "Kwargs")
        ),
    ]
)
_DOC_PARSERS: tuple[Callable[[str], docstring_parser.Docstring], ...] = (
    _GOOGLE.parse,
    numpydoc.parse,
    rest.parse,
    epydoc.parse,
)
_ARGUMENT_KEYS = frozenset({"param", "keyword", "other_param"})
# Schema keywords whose values are data, not schemas: titles inside them are left alone.
_DATA_KEYWORDS = frozenset({"default", "examples", "const", "enum"})

__all__ = ["Tool", "ToolArgumentsError", "tool"]


class ToolArgumentsError(TetherError):
    """The model called a tool with arguments that do not fit its schema.

    The message is written for the model to read and correct its call.

    Attributes:
        tool_name: the tool that was called.
        errors: the validation problems, one per line (``"<argument>: <problem>"``).
    """

    def __init__(self, message: str, *, tool_name: str, errors: str) -> None:
        super().__init__(message)
        self.tool_name = tool_name
        self.errors = errors


class Tool(Generic[P, R]):
    """A function the model can call; built by :func:`tool`.

    Calling the object calls the function unchanged; ``inspect.signature`` and the docstring
    are the function's own.

    Args:
        fn: the function (sync or ``async``).
        name: see :func:`tool`.
        description: see :func:`tool`.
        localns: extra names for resolving string annotations (the decorating scope's locals).

    Raises:
        ConfigurationError: as for :func:`tool`.

    Attributes:
        name: the name the model calls it by.
        description: what the model is told the tool does.
        parameters: the JSON schema (``"type": "object"``) of the arguments.
        fn: the wrapped function.
    """

    # Set by functools.update_wrapper: the function's own, as for the function itself.
    __name__: str
    __qualname__: str

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        localns: Mapping[str, Any] | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.timeout_seconds = check_timeout(timeout_seconds, "tool timeout_seconds")
        self.name = name if name is not None else getattr(fn, "__name__", "")
        if not _NAME_RE.match(self.name):
            raise ConfigurationError(
                f"tool name {self.name!r} is not accepted by model providers: use 1-64 letters, "
                "digits, '_' or '-' (pass name=... to @tool)"
            )
        self._signature = inspect.signature(fn)
        summary, arg_docs = parse_docstring(inspect.getdoc(fn) or "", self._signature.parameters)
        self.description = description if description is not None else summary
        self._model = _arguments_model(fn, self.name, self._signature, arg_docs, localns)
        self.parameters = _json_schema(self._model, self.name)

    @property
    def spec(self) -> ToolSpec:
        """The :class:`ToolSpec` to offer the model (a fresh copy each time)."""
        return ToolSpec(self.name, self.description, copy.deepcopy(self.parameters))

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r})"

    async def ainvoke(self, arguments: Mapping[str, Any]) -> Any:
        """Validate the model's arguments, then run the function.

        Arguments are coerced by pydantic (``"3"`` becomes ``3`` for an ``int``; a dict becomes
        a model instance for a pydantic-model parameter). Arguments the model left out take the
        function's defaults. A sync function runs directly in the caller's task — not in a
        thread — so context variables (the run's id, :func:`tether.interrupt`) work inside it.

        Args:
            arguments: the decoded JSON arguments of the model's call.

        Returns:
            What the function returns (awaited, for an ``async def``).

        Raises:
            ToolArgumentsError: the arguments are missing, unknown, of the wrong type, or were
                not valid JSON (``{INVALID_JSON_KEY: raw}``). The function is not called.
            StepTimeoutError: the tool ran past its ``timeout_seconds`` (an ``async`` tool is
                cancelled; a sync one, run in a thread of its own when it has a limit, is
                abandoned).
            Exception: whatever the function raises, unchanged.
        """
        args, kwargs = self.bind(arguments)
        if self.timeout_seconds is not None:
            ctx = current_run()
            return await bounded(
                functools.partial(self.fn, **kwargs),
                tuple(args),
                timeout_seconds=self.timeout_seconds,
                step=f"tool {self.name!r}",
                execution_id=ctx.execution_id if ctx is not None else "",
            )
        result: Any = self.fn(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    def bind(self, arguments: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Validate the model's arguments and return the ``(args, kwargs)`` to call with.

        Raises:
            ToolArgumentsError: as for :meth:`ainvoke`.
        """
        if set(arguments) == {INVALID_JSON_KEY}:
            raw = arguments[INVALID_JSON_KEY]
            problem = f"arguments are not a JSON object: {raw!r}"
            raise ToolArgumentsError(
                f"Invalid arguments for tool {self.name!r}: {problem}. "
                "Call it again with a JSON object matching its schema.",
                tool_name=self.name,
                errors=problem,
            )
        try:
            validated = self._model.model_validate(dict(arguments))
        except pydantic.ValidationError as exc:
            errors = _describe_errors(exc)
            raise ToolArgumentsError(
                f"Invalid arguments for tool {self.name!r}:\n{errors}\n"
                "Call it again with arguments matching its schema.",
                tool_name=self.name,
                errors=errors,
            ) from None
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for index, (param_name, param) in enumerate(self._signature.parameters.items()):
            field_name = _field_name(index)
            if param.kind is inspect.Parameter.POSITIONAL_ONLY:
                args.append(getattr(validated, field_name))
            elif field_name in validated.model_fields_set:
                kwargs[param_name] = getattr(validated, field_name)
        return args, kwargs


@overload
def tool(
    fn: Callable[P, R],
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float | None = None,
) -> Tool[P, R]: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float | None = None,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float | None = None,
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Turn a typed function (sync or ``async``) into a :class:`Tool`.

    Use bare (``@tool``) or with options (``@tool(name="search", description="...")``).

    Args:
        fn: the function; every parameter must be a plain named one (no ``*args`` or
            ``**kwargs``) whose annotation pydantic can validate. Unannotated parameters
            accept any JSON value.
        name: the name the model calls it by; defaults to the function's ``__name__``.
        description: what the model is told; defaults to the docstring's first paragraph.
        timeout_seconds: the tool's limit: past it the run fails with ``StepTimeoutError``
            (resumable; docs/design.md §12). An ``async`` tool is cancelled at its ``await``;
            a sync tool with a limit runs in a thread of its own and is abandoned.

    Returns:
        The :class:`Tool`, or a decorator producing one when ``fn`` is not given.

    Raises:
        ConfigurationError: the name is not ``[A-Za-z0-9_-]{1,64}``, the signature has
            ``*args``/``**kwargs``, an annotation cannot be resolved, or pydantic cannot build a
            JSON schema for it.
    """
    # Annotations of a tool defined inside a function may name classes local to it; they are
    # resolved against the decorating frame's locals, as pydantic does for models.
    if fn is not None:
        return Tool(
            fn,
            name=name,
            description=description,
            localns=sys._getframe(1).f_locals,
            timeout_seconds=timeout_seconds,
        )

    def decorate(inner: Callable[P, R]) -> Tool[P, R]:
        return Tool(
            inner,
            name=name,
            description=description,
            localns=sys._getframe(1).f_locals,
            timeout_seconds=timeout_seconds,
        )

    return decorate


def parse_docstring(doc: str, params: Collection[str] | None = None) -> tuple[str, dict[str, str]]:
    """Split a docstring into its summary and per-argument descriptions.

    Google (``Args:``), NumPy (``Parameters`` / ``----------``) and reST (``:param x:``)
    sections are read by ``docstring_parser``; a section written inline in a paragraph, as in
    ``"Refund an order. Args: order_id: the order. amount: in cents."``, is split at the
    argument names.

    Args:
        doc: the cleaned docstring (as :func:`inspect.getdoc` returns it).
        params: the function's parameter names. An inline section is split only at these
            names when given (so ``"ratio: 3: 1"`` stays one description); without them, at
            any ``word:``.

    Returns:
        ``(summary, {argument: description})``: the first paragraph (up to an inline section)
        with its lines joined by spaces, and each argument's description with its lines
        joined. Both are empty when absent.
    """
    summary = " ".join(_first_paragraph(doc.expandtabs()).split())
    inline = _INLINE_SECTION_RE.search(summary)
    if inline is not None:
        summary = summary[: inline.start()].strip()
    descriptions = _sectioned_arguments(doc)
    if not descriptions:
        descriptions = _inline_arguments(" ".join(doc.split()), params)
    return summary, descriptions


def _first_paragraph(doc: str) -> str:
    lines = doc.splitlines()
    kept: list[str] = []
    for index, line in enumerate(lines):
        stripped = line.strip()
        underlined = index + 1 < len(lines) and set(lines[index + 1].strip()) == {"-"}
        if not stripped or _SECTION_RE.match(stripped) or stripped.startswith(":") or underlined:
            break
        kept.append(stripped)
    return " ".join(kept)


def _sectioned_arguments(doc: str) -> dict[str, str]:
    """The arguments of the style that finds the most (Google, NumPy, reST, Epydoc)."""
    best: dict[str, str] = {}
    for parse in _DOC_PARSERS:
        try:
            # The leading newline: the Google parser reads a first line "Args:" as a summary.
            parsed = parse("\n" + doc)
        except docstring_parser.ParseError:
            continue
        found = {
            param.arg_name.lstrip("*"): " ".join((param.description or "").split())
            for param in parsed.params
            if param.args and param.args[0] in _ARGUMENT_KEYS
        }
        if len(found) > len(best):
            best = found
    return best


def _inline_arguments(text: str, params: Collection[str] | None) -> dict[str, str]:
    """The entries of an ``Args:`` section written inside a paragraph."""
    header = _INLINE_ARGS_RE.search(text)
    if header is None:
        return {}
    body = text[header.end() :]
    after = _INLINE_SECTION_RE.search(body)
    if after is not None:
        body = body[: after.start()]
    names = "|".join(re.escape(n) for n in params) if params is not None else r"\w+"
    if not names:
        return {}
    entry = re.compile(rf"(?:^|(?<=\s))\*{{0,2}}({names})\s*(?:\([^)]*\))?\s*:(?:\s+|$)")
    found: dict[str, str] = {}
    matches = list(entry.finditer(body))
    for index, match in enumerate(matches):
        if match.group(1) in found:
            continue
        end = matches[index + 1].start() if index + 1 < len(matches) else len(body)
        found[match.group(1)] = body[match.end() : end].strip()
    return found


def _field_name(index: int) -> str:
    # Parameters become fields p0, p1, ... aliased to their real names, so names that clash
    # with BaseModel attributes (json, copy, model_*) or look private (_x) still work.
    return f"p{index}"


def _arguments_model(
    fn: Callable[..., Any],
    tool_name: str,
    signature: inspect.Signature,
    arg_docs: Mapping[str, str],
    localns: Mapping[str, Any] | None,
) -> type[pydantic.BaseModel]:
    try:
        hints = typing.get_type_hints(fn, localns=dict(localns or {}), include_extras=True)
    except Exception as exc:
        raise ConfigurationError(
            f"tool {tool_name!r}: cannot resolve its type annotations ({exc}); define the types "
            "it uses at module level"
        ) from exc
    fields: dict[str, Any] = {}
    for index, (param_name, param) in enumerate(signature.parameters.items()):
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ConfigurationError(
                f"tool {tool_name!r}: *{param_name} cannot be described to a model; "
                "declare each argument as a named parameter"
            )
        default = ... if param.default is inspect.Parameter.empty else param.default
        info = pydantic.Field(default, alias=param_name, description=arg_docs.get(param_name))
        fields[_field_name(index)] = (hints.get(param_name, Any), info)
    try:
        return pydantic.create_model(
            f"{tool_name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid", protected_namespaces=()),
            **fields,
        )
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as exc:
        raise ConfigurationError(
            f"tool {tool_name!r}: pydantic cannot validate its parameters ({exc})"
        ) from exc


def _json_schema(model: type[pydantic.BaseModel], tool_name: str) -> dict[str, Any]:
    try:
        schema = model.model_json_schema(by_alias=True)
    except (pydantic.PydanticInvalidForJsonSchema, pydantic.PydanticUserError) as exc:
        raise ConfigurationError(
            f"tool {tool_name!r}: its parameters have no JSON schema ({exc})"
        ) from exc
    cleaned = _drop_titles(schema)
    assert isinstance(cleaned, dict)
    cleaned.setdefault("properties", {})
    return cleaned


def _drop_titles(node: Any) -> Any:
    """Remove pydantic's generated ``title`` strings, which only add tokens to every call."""
    if isinstance(node, list):
        return [_drop_titles(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _drop_titles(sub) for name, sub in value.items()}
        elif key in _DATA_KEYWORDS:
            out[key] = value
        else:
            out[key] = _drop_titles(value)
    return out


def _describe_errors(exc: pydantic.ValidationError) -> str:
    lines = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "(arguments)"
        message = error["msg"]
        if error["type"] not in ("missing", "extra_forbidden"):
            message = f"{message} (got {error['input']!r})"
        if error["type"] == "extra_forbidden":
            message = "unexpected argument"
        lines.append(f"- {where}: {message}")
    return "\n".join(lines)
