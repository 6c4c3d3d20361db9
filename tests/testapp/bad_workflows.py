"""Workflows fed bad input by the bad-input sweep (tests/*/test_bad_input*.py): text no
database stores as is, multi-megabyte values, BaseExceptions and ``os._exit`` in steps."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from everystep import step, workflow
from everystep.errors import StepFailure


class Abort(BaseException):
    """A BaseException of the user's own, as some libraries define for cancellation."""


# Raised by a step, each of these is recorded as the step's failure.
BASE_EXCEPTIONS: dict[str, type[BaseException]] = {
    "SystemExit": SystemExit,
    "KeyboardInterrupt": KeyboardInterrupt,
    "Abort": Abort,
}
_RAISABLE = {**BASE_EXCEPTIONS, "GeneratorExit": GeneratorExit}


@step
def mirror(value: Any) -> Any:
    return value


@step
def raise_error(message: str) -> None:
    raise ValueError(message, "second arg")


@workflow
def echo_back(value: Any) -> dict[str, Any]:
    """Returns its argument as received, and as a step returned it."""
    return {"arg": value, "step": mirror(value)}


@workflow
def fails_with(message: str) -> None:
    raise_error(message)


@step
def make_big(size: int) -> str:
    return "x" * size


@step
def measure(blob: str) -> int:
    return len(blob)


@workflow
def big_result(size: int) -> int:
    """A step returns ``size`` characters; the run's result is their count."""
    return len(make_big(size))


@workflow
def big_args(blob: str) -> int:
    return measure(blob)


@step
def make_deep(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


@workflow
def deep_result(depth: int) -> Any:
    return make_deep(depth)


@step
def raise_base(kind: str) -> None:
    raise _RAISABLE[kind](3)


@workflow
def raises_base(kind: str) -> None:
    """Step 1 records, step 2 raises the BaseException, step 3 must never run."""
    mirror("before")
    raise_base(kind)
    mirror("after")


@workflow
def catches_base(kind: str) -> str:
    """The body sees a StepFailure where the step raised a BaseException, on the live
    pass as on a replay."""
    try:
        raise_base(kind)
    except StepFailure as exc:
        return mirror(f"caught: {exc}")
    return "not raised"


@workflow
def body_exits() -> None:
    mirror("before")
    sys.exit(4)


@step
def exit_process_once(marker: str) -> str:
    """Kills the process without any cleanup the first time (``marker`` does not exist
    yet), returns normally afterwards."""
    path = Path(marker)
    if not path.exists():
        path.write_text(str(os.getpid()))
        os._exit(17)
    return "survived"


@workflow
def exits_once(marker: str) -> list[Any]:
    return [mirror("before"), exit_process_once(marker), mirror("after")]


@workflow
def stops_with(reason: str) -> None:
    """Ends the run ``stopped`` with ``reason`` (which may hold a NUL)."""
    from everystep import Terminal

    raise Terminal(reason, {"why": reason})


@workflow
def named_step(name: str) -> Any:
    return mirror(1, everystep_id=name)
