"""OpenTelemetry spans for passes, executed steps and forks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from everystep import schedule, tracing
from everystep.testing import crash_after, run_due
from tests.testapp import workflows as wf

pytestmark = pytest.mark.django_db(transaction=True)

_exporter = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    # The global provider can be set once per process; the exporter is cleared per test.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    _exporter.clear()
    yield _exporter
    _exporter.clear()


def test_spans_for_pass_steps_and_fork(spans):
    """A pass, each executed step and the fork get spans with run and step ids, nested."""
    run = schedule(wf.forked)
    run_due()
    finished = spans.get_finished_spans()
    by_name: dict[str, list] = {}
    for span in finished:
        by_name.setdefault(span.name, []).append(span)
    (workflow_span,) = by_name["everystep.workflow"]
    (fork_span,) = by_name["everystep.fork"]
    assert workflow_span.attributes["everystep.run_id"] == str(run.id)
    assert fork_span.attributes["everystep.fork_id"] == "fan"
    step_ids = {s.attributes["everystep.step_id"]: s for s in by_name["everystep.step"]}
    assert set(step_ids) == {"1", "fan.0.1", "fan.1.right", "fan.2.1", "fan.2.2", "3"}
    assert step_ids["1"].parent.span_id == workflow_span.context.span_id
    assert step_ids["fan.1.right"].parent.span_id == fork_span.context.span_id
    assert fork_span.parent.span_id == workflow_span.context.span_id
    assert {s.context.trace_id for s in finished} == {workflow_span.context.trace_id}


def test_replayed_steps_get_no_span(spans):
    """Only executed steps are traced: steps served from the database add no span."""
    run = schedule(wf.sequential, 1, 1)
    with crash_after(wf.pair):
        run_due()
    spans.clear()
    run_due()
    run.refresh_from_db()
    assert run.status == "completed"
    executed = [
        s.attributes["everystep.step_id"]
        for s in spans.get_finished_spans()
        if s.name == "everystep.step"
    ]
    assert sorted(executed) == ["3", "4"]


def test_span_is_a_no_op_without_opentelemetry(monkeypatch):
    """Without the optional dependency the span helper just runs the block."""
    monkeypatch.setattr(tracing, "trace", None)
    ran = []
    with tracing.span("everystep.step", step_id="1"):
        ran.append(True)
    assert ran == [True]


def test_spans_for_an_async_pass_and_its_concurrent_steps(spans):
    """An async body's pass and each executed step, awaited concurrently on the loop or
    run on a thread, get spans under the pass's, in one trace."""
    from tests.testapp import async_workflows as aw

    run = schedule(aw.gathered_branches, 2)
    run_due()
    finished = spans.get_finished_spans()
    (workflow_span,) = [s for s in finished if s.name == "everystep.workflow"]
    assert workflow_span.attributes["everystep.run_id"] == str(run.id)
    steps = {s.attributes["everystep.step_id"]: s for s in finished if s.name == "everystep.step"}
    assert set(steps) == {"1.0.1", "1.0.2", "2.0.1", "2.0.2"}
    assert {s.parent.span_id for s in steps.values()} == {workflow_span.context.span_id}
    assert {s.context.trace_id for s in finished} == {workflow_span.context.trace_id}
