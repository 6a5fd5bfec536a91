"""OpenTelemetry spans for tether runs (the ``otel`` extra).

Call :func:`instrument` once at start-up, after configuring your tracer provider::

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    import tether.otel

    trace.set_tracer_provider(TracerProvider(...))
    tether.otel.instrument()

From then on, in this process:

- each drive of a run (``run``, ``resume``, ``fork``) is a span ``tether.run <runner>``;
- each chain node a child span ``tether.step <node_id>``;
- each model call a span ``tether.llm <agent>`` (with ``gen_ai.usage.*`` token counts);
- each tool call a span ``tether.tool <tool>``.

Every span carries ``tether.execution_id`` and ``tether.node_id`` (the run span: the runner's
name and kind instead of a node). An ``interrupt()`` is not an error: the span gets a
``tether.interrupt`` event and ``tether.status = "paused"``. Every checkpoint written inside a
traced drive stores the trace id in ``node_output["trace_id"]``; ``tether runs show`` and the
web page show it on the timeline. A run paused for days and resumed elsewhere has one trace per
drive; the timeline tells which rows each wrote. See ``docs/observability.md``.

``import tether`` never imports this module or OpenTelemetry.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer, TracerProvider

from . import _trace
from .checkpoint import Checkpoint
from .errors import InterruptSignal

__all__ = [
    "INSTRUMENTATION_NAME",
    "instrument",
    "is_instrumented",
    "trace_id",
    "uninstrument",
]

INSTRUMENTATION_NAME = "tether"

#: The innermost run span of the current drive, and its runner's name.
_run_span: ContextVar[tuple[Span, str] | None] = ContextVar("tether_otel_run_span", default=None)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("tether")
    except Exception:  # not installed as a distribution (e.g. run from a source tree)
        return "0"


class _Call:
    """The model-call span handed to the executor, which reports the response to it."""

    def __init__(self, span: Span) -> None:
        self._span = span

    def response(self, response: Any) -> None:
        usage = getattr(response, "usage", None)
        if usage is not None:
            self._span.set_attribute("gen_ai.usage.input_tokens", int(usage.input_tokens))
            self._span.set_attribute("gen_ai.usage.output_tokens", int(usage.output_tokens))
        calls = getattr(response, "tool_calls", None) or ()
        self._span.set_attribute("tether.tool_calls", [str(c.name) for c in calls])


class OTelTracing:
    """The :class:`tether._trace.TracingBackend` that opens OpenTelemetry spans.

    Args:
        tracer: where spans go.
    """

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    @contextmanager
    def _span(self, name: str, attributes: dict[str, Any]) -> Iterator[Span]:
        # Exceptions are recorded here rather than by the SDK so that an interrupt() — a
        # BaseException by design — pauses the span instead of marking it failed.
        with self._tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as span:
            try:
                yield span
            except InterruptSignal as sig:
                span.add_event("tether.interrupt", {"tether.interrupt_reason": sig.reason})
                span.set_attribute("tether.status", "paused")
                raise
            except BaseException as exc:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                raise

    @contextmanager
    def run(self, kind: str, name: str, execution_id: str) -> Iterator[None]:
        attributes = {
            "tether.execution_id": execution_id,
            "tether.runner_name": name,
            "tether.runner_kind": kind,
        }
        with self._span(f"tether.run {name}", attributes) as span:
            token = _run_span.set((span, name))
            try:
                yield
            finally:
                _run_span.reset(token)

    @contextmanager
    def step(self, execution_id: str, node_id: str, step_type: str) -> Iterator[None]:
        attributes = {
            "tether.execution_id": execution_id,
            "tether.node_id": node_id,
            "tether.step_type": step_type,
        }
        with self._span(f"tether.step {node_id}", attributes):
            yield

    @contextmanager
    def llm_call(self, execution_id: str, node_id: str, llm: Any) -> Iterator[_Call]:
        attributes: dict[str, Any] = {
            "tether.execution_id": execution_id,
            "tether.node_id": node_id,
            "tether.step_type": "llm_call",
            "gen_ai.operation.name": "chat",
            "gen_ai.system": type(llm).__name__,
        }
        model = getattr(llm, "model", None)
        if isinstance(model, str):
            attributes["gen_ai.request.model"] = model
        current = _run_span.get()
        agent = node_id if current is None else current[1]
        with self._span(f"tether.llm {agent}", attributes) as span:
            yield _Call(span)

    @contextmanager
    def tool_call(self, execution_id: str, node_id: str, tool: str) -> Iterator[None]:
        attributes = {
            "tether.execution_id": execution_id,
            "tether.node_id": node_id,
            "tether.step_type": "tool_call",
            "gen_ai.tool.name": tool,
        }
        with self._span(f"tether.tool {tool}", attributes):
            yield

    def trace_id(self) -> str | None:
        context = trace.get_current_span().get_span_context()
        return trace.format_trace_id(context.trace_id) if context.is_valid else None

    def run_outcome(self, status: str, error: str | None) -> None:
        current = _run_span.get()
        if current is None:
            return
        span = current[0]
        span.set_attribute("tether.status", status)
        if status == "failed":
            span.set_status(Status(StatusCode.ERROR, error or "the run failed"))


def trace_id(checkpoint: Checkpoint) -> str | None:
    """The trace id (32 hex digits) a checkpoint written inside a traced drive carries in its
    ``node_output["trace_id"]``, or ``None`` for a row written untraced (see
    ``docs/observability.md``, "The trace id on checkpoints")."""
    return _trace.trace_id_of(checkpoint)


def instrument(tracer_provider: TracerProvider | None = None) -> None:
    """Trace every run this process drives from now on.

    Args:
        tracer_provider: where spans go; default: OpenTelemetry's global provider (as set by
            ``opentelemetry.trace.set_tracer_provider`` or auto-configuration).

    Calling it again replaces the provider.
    """
    tracer = trace.get_tracer(INSTRUMENTATION_NAME, _version(), tracer_provider=tracer_provider)
    _trace.set_backend(OTelTracing(tracer))


def uninstrument() -> None:
    """Stop tracing runs; the hooks go back to no-ops."""
    _trace.set_backend(None)


def is_instrumented() -> bool:
    """Whether :func:`instrument` is in force."""
    return isinstance(_trace.current_backend(), OTelTracing)
