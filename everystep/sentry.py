"""Report unhandled run failures to Sentry, when the host process initialised it."""

from __future__ import annotations

from typing import Any

from everystep import signals


def capture(exc: BaseException, **context: Any) -> None:
    """Capture ``exc`` with ``context`` (run id, workflow, runner) as tags; a no-op
    unless ``sentry_sdk`` is installed and initialised."""
    try:
        import sentry_sdk
    except ImportError:
        return
    if not sentry_sdk.is_initialized():
        return
    with sentry_sdk.new_scope() as scope:
        for key, value in context.items():
            scope.set_tag(f"everystep.{key}", str(value))
        scope.set_context("everystep", {key: str(value) for key, value in context.items()})
        sentry_sdk.capture_exception(exc)


def _on_run_finished(kw: dict[str, Any]) -> None:
    # Only failures are reported: a stop (Terminal) is a decision, a blocked run waits
    # for a human, and a drain requeue is not an outcome at all.
    if kw["status"] == "failed" and kw.get("exc") is not None:
        capture(kw["exc"], run_id=kw["run_id"], workflow=kw["workflow"], runner=kw["runner"])


def install() -> None:
    """Subscribe to run outcomes (idempotent)."""
    signals.run_finished.subscribe(_on_run_finished)
