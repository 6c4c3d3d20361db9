"""Per-pass state, and nothing else: the run being replayed (``RunState``), the id
scopes, and the current frame. What a pass writes, and how it decides what to write, is
``everystep.engine.core.recorded``'s.

A *frame* says where the calling code is: which run, which id scope (the workflow body
or one fork branch), and whether it is already inside a step body (where nested step
calls are plain calls). It lives in a ``ContextVar`` so fork branch threads each get
their own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from everystep.engine.core import kinds
from everystep.errors import EverystepError
from everystep.safe_text import storable_text
from everystep.values import Claim, RecordedStep

MAX_STEP_ID_LENGTH = 300


class Scope:
    """Hands out step ids in one scope: ``1, 2, 3…`` or a validated name, with a prefix."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self._position = 0
        self._names: set[str] = set()

    def next_id(self, name: str | None) -> str:
        """Consume one position and return the full step id for this call."""
        self._position += 1
        if name is None:
            local = str(self._position)
        else:
            check_name(name)
            if name in self._names:
                raise EverystepError(
                    f"step name {name!r} is used twice in scope {self.prefix or '<root>'!r}"
                )
            self._names.add(name)
            local = name
        return check_length(self.prefix + local)


def check_name(name: object, what: str = "everystep_id") -> None:
    """Refuse names that would make step ids ambiguous or unstable (``what``: which name,
    for the message: a step's ``everystep_id`` or a patch's change id)."""
    if not isinstance(name, str) or not name:
        raise EverystepError(f"{what} must be a non-empty string, got {name!r}")
    # A step id is stored and matched as it is: refused where some database cannot.
    storable_text(name, f"{what} {name!r}")
    if "." in name:
        raise EverystepError(f"{what} {name!r} must not contain a dot")
    if any(ch.isspace() for ch in name):
        raise EverystepError(f"{what} {name!r} must not contain whitespace")
    if name.isdigit():
        raise EverystepError(f"{what} {name!r} must not be all digits (those are positional ids)")


def check_length(step_id: str) -> str:
    """``step_id`` if the ``Step`` table can hold it."""
    if len(step_id) > MAX_STEP_ID_LENGTH:
        raise EverystepError(
            f"step id {step_id[:40]!r}… is {len(step_id)} characters; "
            f"the limit is {MAX_STEP_ID_LENGTH}"
        )
    return step_id


@dataclass(frozen=True)
class Held:
    """An outcome record held back (``everystep.engine.core.recorded.record``): its columns,
    and what its announcement says once it is written."""

    values: dict[str, Any]
    step: RecordedStep
    duration: float


@dataclass
class AsyncPass:
    """What an async body's pass keeps beside the rest of its ``RunState``: its database
    work runs on threads, its tasks each get a scope, and it ends once the body has."""

    # The waits its tasks reached (an async pass ends when the body does, so it waits for
    # the earliest of them all, as a fork waits for its branches).
    suspensions: list[Any] = field(default_factory=list)
    # Its tasks, to be ended before the pass ends; the ids of the operations called but
    # not yet awaited (one never awaited fails the run: a forgotten await); the tasks
    # inside an operation now (``async_ops.operation``).
    tasks: list[Any] = field(default_factory=list)
    unawaited: dict[str, str] = field(default_factory=dict)
    busy: set[Any] = field(default_factory=set)


@dataclass
class RunState:
    """Everything one pass over one run shares across its fork threads."""

    claim: Claim
    workflow_name: str
    records: dict[str, RecordedStep]
    should_drain: Callable[[], bool] = lambda: False
    threads_allowed: bool = True
    # A replay check (``everystep.replays.check``): serve records, write nothing, stop with
    # ``ReachedNewWork`` where a record would be written (``recorded.writing``).
    checking: bool = False
    aborted: BaseException | None = None
    # The ids this pass has reached so far (served, executed or decided): the records
    # outside this set are history the pass has not replayed yet (see ``patched``).
    visited: set[str] = field(default_factory=set)
    # Patch decisions taken on this pass: change id → True (new code) / False (old code).
    patches: dict[str, bool] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Where the run's outcome can carry a record in its own statement
    # (``merges_records``), an outcome record of the body's own scope is held back
    # until the pass writes anything else, forks, starts a step's body
    # (``recorded.flush``) or ends: the pass's last record then costs no statement of
    # its own.
    holds_records: bool = False
    held: Held | None = None
    # Spans are made for this pass and its steps and forks (``tracing.enabled()``, asked
    # once per pass rather than once per step).
    traced: bool = False
    # What the definition's ``begin`` hook returned as this pass began (a Django
    # ``@task``'s run: its ``TaskResult``, for the task's context); None without one.
    begun: Any = None
    # An async body's pass (``everystep.engine.asynchronous.async_body``): what only it keeps; None
    # for a sync body's.
    aio: AsyncPass | None = None
    # The values this pass published (``everystep.engine.operations.progress``): key → stored JSON
    # text, so publishing a value again writes nothing (None: a key a replay passed, not
    # written); per pass, since another worker may have published since this one last
    # did. ``publishing`` orders a key's writes.
    published: dict[str, str | None] = field(default_factory=dict)
    publishing: threading.Lock = field(default_factory=threading.Lock)

    @property
    def is_async(self) -> bool:
        return self.aio is not None

    @property
    def async_pass(self) -> AsyncPass:
        """``aio``, for code that runs in async passes only."""
        assert self.aio is not None, "not an async body's pass"
        return self.aio

    @property
    def run_id(self) -> UUID:
        return self.claim.run_id

    def recorded(self, step_id: str) -> RecordedStep | None:
        with self.lock:
            return self.records.get(step_id)

    def remember(self, record: RecordedStep) -> None:
        with self.lock:
            self.records[record.step_id] = record

    def visit(self, step_id: str) -> None:
        with self.lock:
            self.visited.add(step_id)

    def history_beyond(self, prefix: str) -> bool:
        """Whether the run recorded a step or wait in the scope ``prefix`` (its forks'
        branches included) that this pass has not reached: the run went past this point
        before. Patch decisions do not count: they take no position, so new code from
        here cannot clash with them, and one whose call was since deleted (a removed
        ``deprecate_patch`` line) is never reached again."""
        with self.lock:
            return any(
                step_id.startswith(prefix)
                and step_id not in self.visited
                and kinds.of(record.name).takes_position
                for step_id, record in self.records.items()
            )

    def snapshot(self) -> dict[str, RecordedStep]:
        with self.lock:
            return dict(self.records)

    def abort(self, exc: BaseException) -> BaseException:
        """Make ``exc`` the outcome of this pass even if user code swallows it."""
        with self.lock:
            if self.aborted is None:
                self.aborted = exc
            return self.aborted


@dataclass(frozen=True)
class Frame:
    run: RunState
    scope: Scope
    step_id: str | None = None  # set while a step body runs

    @property
    def in_step(self) -> bool:
        return self.step_id is not None

    def next_id(self, name: str | None) -> str:
        """The id of the next step call (or wait, or fork) in this frame's scope, marked
        as reached by this pass."""
        step_id = self.scope.next_id(name)
        self.run.visit(step_id)
        return step_id


current_frame: ContextVar[Frame | None] = ContextVar("everystep_frame", default=None)
