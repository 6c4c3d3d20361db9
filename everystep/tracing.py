"""OpenTelemetry spans: one per workflow pass, per executed step and per fork.

A no-op unless ``opentelemetry-api`` is installed (``everystep[otel]``); with the API
but no SDK configured, the spans are OpenTelemetry's own no-op spans. Fork branch
threads inherit the current span through ``contextvars``, so step spans nest under
their fork.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

try:
    from opentelemetry import trace
except ImportError:  # the optional extra is not installed
    trace = None  # type: ignore[assignment]


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[None]:
    """A span named ``name`` around the block, with ``everystep.*`` attributes."""
    if trace is None:
        yield
        return
    # Looked up per call: a tracer provider configured after import is still used.
    tracer = trace.get_tracer("everystep")
    attrs = {f"everystep.{key}": str(value) for key, value in attributes.items()}
    with tracer.start_as_current_span(name, attributes=attrs):
        yield
