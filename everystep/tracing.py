"""OpenTelemetry spans: one per workflow pass, per executed step and per fork.

A no-op unless ``opentelemetry-api`` is installed (``everystep[otel]``) and a tracer
provider is configured; until then no span object is even built, since spans open on
every step. Fork branch threads inherit the current span through ``contextvars``, so
step spans nest under their fork.
"""

from __future__ import annotations

import contextlib
from typing import Any

try:
    from opentelemetry import trace
except ImportError:  # the optional extra is not installed
    trace = None  # type: ignore[assignment]


def enabled() -> bool:
    """Whether spans are made: a tracer provider is configured. Looked up per call, so a
    provider configured after import is still used (a pass asks once, at its start,
    for itself and its steps: ``RunState.traced``)."""
    # The proxy is what the API returns while none is configured.
    return trace is not None and not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider
    )


def span(name: str, **attributes: Any) -> contextlib.AbstractContextManager[Any]:
    """A span named ``name`` around the block, with ``everystep.*`` attributes."""
    if trace is None:
        return contextlib.nullcontext()
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        return contextlib.nullcontext()
    attrs = {f"everystep.{key}": str(value) for key, value in attributes.items()}
    return provider.get_tracer("everystep").start_as_current_span(name, attributes=attrs)
