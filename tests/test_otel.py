"""OpenTelemetry spans of chain and agent runs, and the trace id on their checkpoints."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode, format_trace_id

import tether.otel
from tests.agent.agents import make_agent
from tests.support.chains import orders_chain
from tether import Chain, Resume, _trace
from tether.testing import ScriptedLLM


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tether.otel.instrument(provider)
    try:
        yield exporter
    finally:
        tether.otel.uninstrument()
        provider.shutdown()


def by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        out.setdefault(span.name, []).append(span)
    return out


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def trace_hex(span: ReadableSpan) -> str:
    assert span.context is not None
    return format_trace_id(span.context.trace_id)


def test_chain_run_has_a_run_span_and_a_step_span_per_node_with_ids(store, spans):
    result = orders_chain(store).run({"order_id": "A-1", "amount": 50})
    assert result.status == "completed"
    eid = result.execution_id

    named = by_name(spans)
    (run,) = named["tether.run orders"]
    assert attrs(run) == {
        "tether.execution_id": eid,
        "tether.runner_name": "orders",
        "tether.runner_kind": "chain",
        "tether.status": "completed",
    }
    steps = [s for s in spans.get_finished_spans() if s.name.startswith("tether.step ")]
    assert [attrs(s)["tether.node_id"] for s in steps] == ["validate", "charge", "notify"]
    for step in steps:
        assert attrs(step)["tether.execution_id"] == eid
        assert step.parent is not None and run.context is not None
        assert step.parent.span_id == run.context.span_id
        assert trace_hex(step) == trace_hex(run)

    rows = store.list(eid)
    assert [_trace.trace_id_of(cp) for cp in rows] == [trace_hex(run)] * len(rows)
    # The stamp joins what the executor wrote; it replaces nothing.
    assert rows[0].node_output == {"updated_keys": ["log", "valid"], "trace_id": trace_hex(run)}


def test_paused_and_resumed_chain_is_one_trace_per_drive_and_the_interrupt_is_no_error(
    store, spans
):
    chain = orders_chain(store)
    paused = chain.run({"order_id": "A-1", "amount": 500})
    assert paused.status == "paused"
    first = by_name(spans)
    (run1,) = first["tether.run orders"]
    assert attrs(run1)["tether.status"] == "paused"
    (review,) = first["tether.step review"]
    assert review.status.status_code is StatusCode.UNSET
    assert [e.name for e in review.events] == ["tether.interrupt"]

    spans.clear()
    done = chain.resume(paused.execution_id, Resume(approved=True))
    assert done.status == "completed"
    (run2,) = by_name(spans)["tether.run orders"]
    assert trace_hex(run2) != trace_hex(run1)

    by_node = {cp.node_id: _trace.trace_id_of(cp) for cp in store.list(paused.execution_id)}
    assert by_node["charge"] == trace_hex(run1)
    assert by_node["notify"] == by_node["run_end"] == trace_hex(run2)


def test_failing_node_marks_its_step_and_run_spans_as_errors(store, spans):
    chain = Chain("fails", store)

    def explode(state: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("no stock")

    chain.add_node("explode", explode)
    assert chain.run({}).status == "failed"
    named = by_name(spans)
    (step,) = named["tether.step explode"]
    assert step.status.status_code is StatusCode.ERROR
    assert [e.name for e in step.events] == ["exception"]
    (run,) = named["tether.run fails"]
    assert run.status.status_code is StatusCode.ERROR
    assert attrs(run)["tether.status"] == "failed"


async def test_agent_run_spans_each_model_call_and_tool_call(store, spans):
    llm = ScriptedLLM(
        [
            [
                {"name": "lookup", "arguments": {"order_id": "A-1"}},
                {"name": "add", "arguments": {"a": 2, "b": 3}},
            ],
            "shipped, and 5",
        ]
    )
    result = await make_agent("plain", llm, store).arun("where is A-1?")
    assert result.status == "completed"
    eid = result.execution_id

    named = by_name(spans)
    (run,) = named["tether.run helper"]
    assert attrs(run)["tether.runner_kind"] == "agent"
    assert attrs(run)["tether.status"] == "completed"
    llm_spans = named["tether.llm helper"]
    assert [attrs(s)["tether.node_id"] for s in llm_spans] == ["turn:0", "turn:1"]
    assert attrs(llm_spans[0])["tether.tool_calls"] == ("lookup", "add")
    assert "gen_ai.usage.input_tokens" in attrs(llm_spans[0])
    tools = named["tether.tool lookup"] + named["tether.tool add"]
    assert [attrs(s)["tether.node_id"] for s in tools] == ["turn:0/tool:lookup", "turn:0/tool:add"]
    for span in [*llm_spans, *tools]:
        assert attrs(span)["tether.execution_id"] == eid
        assert span.parent is not None and run.context is not None
        assert span.parent.span_id == run.context.span_id

    rows = store.list(eid)
    assert {_trace.trace_id_of(cp) for cp in rows} == {trace_hex(run)}


async def test_agent_tool_interrupt_pauses_without_an_error_span(store, spans):
    llm = ScriptedLLM([[{"name": "approve", "arguments": {"amount": 900}}], "done"])
    paused = await make_agent("plain", llm, store).arun("refund 900")
    assert paused.status == "paused"
    (run,) = by_name(spans)["tether.run helper"]
    assert attrs(run)["tether.status"] == "paused"
    assert run.status.status_code is StatusCode.UNSET
    pending = store.get_pending_interrupt(paused.execution_id)
    assert pending is not None
    interrupted = [cp for cp in store.list(paused.execution_id) if cp.status == "interrupted"]
    assert [_trace.trace_id_of(cp) for cp in interrupted] == [trace_hex(run)]


def test_no_trace_id_and_no_spans_when_not_instrumented(store):
    assert _trace.current_backend() is None
    result = orders_chain(store).run({"order_id": "A-1", "amount": 50})
    assert all(_trace.trace_id_of(cp) is None for cp in store.list(result.execution_id))
    assert store.list(result.execution_id)[-1].node_output is None


def test_runs_show_prints_the_trace_id_of_each_row(store, db_url, spans):
    from tests.cli.test_cli import as_json, tether_cli

    eid = orders_chain(store).run({"order_id": "A-1", "amount": 50}).execution_id
    (run,) = by_name(spans)["tether.run orders"]
    shown = as_json(tether_cli(db_url, "runs", "show", eid, "--json"))
    assert {row["trace_id"] for row in shown["checkpoints"]} == {trace_hex(run)}
    table = tether_cli(db_url, "runs", "show", eid)
    assert table.returncode == 0, table.stderr
    assert trace_hex(run) in table.stdout


def test_import_tether_otel_is_explicit_and_tether_alone_imports_no_opentelemetry():
    code = "import sys, tether; print('opentelemetry' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "False", proc.stderr


def test_web_timeline_shows_the_trace_id_of_each_row(store, spans):
    from starlette.testclient import TestClient

    from tether.web import create_app

    eid = orders_chain(store).run({"order_id": "A-1", "amount": 50}).execution_id
    (run,) = by_name(spans)["tether.run orders"]
    with TestClient(create_app(store, no_auth=True), base_url="http://127.0.0.1") as client:
        shown = client.get(f"/api/runs/{eid}").json()
        assert {row["trace_id"] for row in shown["checkpoints"]} == {trace_hex(run)}
        page = client.get(f"/runs/{eid}").text
        assert page.count(trace_hex(run)) == len(shown["checkpoints"])
