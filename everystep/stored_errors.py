"""How an exception is stored (``encode_error``) and rebuilt on replay (``decode_error``):
a step's failure, a run's, an awaited run's.

The stored form is ``{type, message, args}`` plus a bounded ``traceback``; rebuilding
looks the type up by its qualified name in the allow-list (``everystep.stored_types``:
nothing is imported) and calls it with the decoded args, falling back to
``StepFailure`` carrying the message when that type is not allowed here, is gone or will
not take them.
"""

from __future__ import annotations

import json
from typing import Any

from everystep import failure_detail, stored_types
from everystep.errors import EverystepError, StepFailure
from everystep.safe_text import printable
from everystep.serde import decode, encode_nested, qualified_name

# The message and the args of a stored exception, at most this many bytes each (UTF-8;
# the args as JSON), as the traceback is bounded: a 2 MB message was stored whole, on the
# step's record and again on the run's.
MAX_PART_BYTES = failure_detail.MAX_BYTES


def encode_error(exc: BaseException) -> dict[str, Any]:
    """Store an exception as ``{type, message, args}``, and ``traceback`` (bounded text,
    see ``failure_detail``) if it was raised; an argument that cannot be serialized is
    stored as its ``repr()``. A message past ``MAX_PART_BYTES`` is cut, and so are the
    args' long strings; args still past it are not stored (``args: null``), and a replay
    then rebuilds a ``StepFailure`` carrying the message, as the live pass sees it too
    (``engine.operations.step_run.failed_outcome``)."""
    # The process has the type in hand: a replay here rebuilds it (a local or __main__
    # class is not remembered, and comes back as a StepFailure in every process).
    stored_types.remember(type(exc))
    error = {
        "type": printable(qualified_name(type(exc))),
        "message": _cut(printable(str(exc))),
        "args": _bounded_args(exc.args),
    }
    trace = failure_detail.traceback_text(exc)
    if trace is not None:
        # Escaped before it is bounded: the escapes take room too.
        error["traceback"] = failure_detail.bounded(printable(trace))
    return error


def _bounded_args(raw: tuple[Any, ...]) -> list[Any] | None:
    # The args sit two levels down in the stored error: {"args": [...]}.
    args = [_encode_or_repr(arg, 2) for arg in raw]
    if _json_bytes(args) <= MAX_PART_BYTES:
        return args
    args = [_cut(arg) if isinstance(arg, str) else arg for arg in args]
    return args if _json_bytes(args) <= MAX_PART_BYTES else None


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8", "replace"))


def _cut(text: str) -> str:
    """``text`` within ``MAX_PART_BYTES`` (its JSON escapes included), its start kept."""
    if _json_bytes(text) <= MAX_PART_BYTES:
        return text
    note = f"… [cut: {len(text):,} characters]"
    kept = text[: MAX_PART_BYTES // 2]  # an escaped character takes up to 6 bytes: halve
    while _json_bytes(kept + note) > MAX_PART_BYTES:
        kept = kept[: len(kept) // 2]
    return kept + note


def _encode_or_repr(value: Any, depth: int) -> Any:
    try:
        return encode_nested(value, "exception argument", depth)
    except EverystepError:
        return printable(repr(value))


def decode_error(data: dict[str, Any]) -> BaseException:
    """Rebuild a stored exception, or a ``StepFailure`` carrying its message when the
    type is gone or cannot be built from its stored args."""
    rebuilt = _rebuild_error(data)
    # Its traceback is the recorded one: the frames of a replay are not where it happened.
    failure_detail.recorded(rebuilt, data.get("traceback"))
    return rebuilt


def _rebuild_error(data: dict[str, Any]) -> BaseException:
    cls = stored_types.resolve_error(data["type"])
    if cls is None:
        stored_types.warn_unknown("exception type", data["type"], "a StepFailure")
    args = data.get("args")
    if cls is not None and issubclass(cls, Exception) and args is not None:
        try:
            return cls(*decode(args))
        except Exception:  # any constructor signature we cannot satisfy
            pass
    message = data.get("message")
    return StepFailure(f"{data['type']}: {message}" if message else data["type"], data["type"])
