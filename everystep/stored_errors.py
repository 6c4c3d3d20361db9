"""How an exception is stored (``encode_error``) and rebuilt on replay (``decode_error``):
a step's failure, a run's, an awaited run's.

The stored form is ``{type, message, args}`` plus a bounded ``traceback``; rebuilding
imports the type by its qualified name and calls it with the decoded args, falling back
to ``StepFailure`` carrying the message when that type is gone or will not take them.
"""

from __future__ import annotations

from typing import Any

from everystep import failure_detail
from everystep.errors import EverystepError, StepFailure
from everystep.safe_text import printable
from everystep.serde import decode, encode_nested, import_qualified, qualified_name


def encode_error(exc: BaseException) -> dict[str, Any]:
    """Store an exception as ``{type, message, args}``, and ``traceback`` (bounded text,
    see ``failure_detail``) if it was raised; an argument that cannot be serialized is
    stored as its ``repr()``."""
    # The args sit two levels down in the stored error: {"args": [...]}.
    args = [_encode_or_repr(arg, 2) for arg in exc.args]
    error = {
        "type": printable(qualified_name(type(exc))),
        "message": printable(str(exc)),
        "args": args,
    }
    trace = failure_detail.traceback_text(exc)
    if trace is not None:
        # Escaped before it is bounded: the escapes take room too.
        error["traceback"] = failure_detail.bounded(printable(trace))
    return error


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
    cls = import_qualified(data["type"])
    args = data.get("args")
    if isinstance(cls, type) and issubclass(cls, Exception) and args is not None:
        try:
            return cls(*decode(args))
        except Exception:  # any constructor signature we cannot satisfy
            pass
    message = data.get("message")
    return StepFailure(f"{data['type']}: {message}" if message else data["type"], data["type"])
