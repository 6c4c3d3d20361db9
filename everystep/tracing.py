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


def span(name: str, **attributes: Any) -> contextlib.AbstractContextManager[Any]:
    """A span named ``name`` around the block, with ``everystep.*`` attributes."""
    if trace is None:
        return contextlib.nullcontext()
    # Looked up per call: a tracer provider configured after import is still used. The
    # proxy is what the API returns while none is configured.
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        return contextlib.nullcontext()
    attrs = {f"everystep.{key}": str(value) for key, value in attributes.items()}
    return provider.get_tracer("everystep").start_as_current_span(name, attributes=attrs)
