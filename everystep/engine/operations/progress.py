"""``publish(key, value)``: a run's progress, written where readers see it at once.

From a step, ``publish`` writes its value in a statement of its own and returns once
it is committed, long before the step's record: on the step's thread when its
connection is in no transaction (one autocommit upsert), otherwise on the process's
writer thread, whose connection is in none — a step's transaction (an atomic step, or
one the step opened) would hold the value back until it commits. SQLite has one writer,
and the step's transaction holds it: there the value is written in that transaction,
visible at its commit. Code on a running event loop (an async step) cannot use the
ORM, so its values go through the writer thread too, the loop waiting for the commit.

From a body, ``publish`` is replay-safe: where the run has records beyond this point of
the body the run has been here before, and the value was published then; a replay
publishes nothing, so a replay after a durable sleep never sets a value back to an
earlier one. A replay check (``replays/check``) writes nothing either.

Cheap when a loop publishes often: a value equal to the one this pass last wrote under
that key is not written again; and on PostgreSQL the NOTIFY that wakes watchers is not
sent in the value's own transaction (a NOTIFY takes a lock over the whole database at
commit, which would put every publishing commit of every process in one line) but by
the writer thread, at most once per ``NOTIFY_GAP`` for all the process's runs.
Watchers poll as well, so a NOTIFY lost costs latency, not correctness.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any
from uuid import UUID

from everystep import conf, serde
from everystep.engine.core.pass_state import RunState, check_name, current_frame
from everystep.errors import EverystepError, StoreUnavailable
from everystep.store import database, published
from everystep.store.wake import notify_published
from everystep.sync_callers import sync_caller

# A published value's cap: its stored JSON, in bytes. Progress is a few numbers and
# words; a page reads every value of a run at once, and watchers read them per change.
MAX_VALUE_BYTES = 64 * 1024
# Keys per run, over all its passes and processes: counted in the pass's memory first (a
# body names the same keys on every pass), then, for a key new to the pass, against the
# run's stored keys by the write itself (a step served from its record publishes nothing,
# so a later pass would not see its keys otherwise).
MAX_KEYS = 100
MAX_KEY_LENGTH = 200
# The writer thread sends at most one NOTIFY per this many seconds, for every run of
# the process that published meanwhile.
NOTIFY_GAP = 0.01


def publish(key: str, value: Any) -> None:
    """Store ``value`` as the latest under ``key`` for the current run (the module
    docstring says when readers see it)."""
    frame = current_frame.get()
    if frame is None:
        raise EverystepError(
            "publish() is called from a workflow body or from inside a step: there is no run here"
        )
    check_name(key, "publish() key")
    if len(key) > MAX_KEY_LENGTH:
        raise EverystepError(
            f"publish() key {key[:40]!r}… is {len(key)} characters; the limit is {MAX_KEY_LENGTH}"
        )
    # Typed values (a dataclass, a pydantic model) are published as their JSON form,
    # which is what the readers (a page, a stream) show.
    stored = serde.encode(value, f"the value published under {key!r}", serde.EVERYTHING)
    text = json.dumps(stored, separators=(",", ":"), ensure_ascii=False)
    size = len(text.encode())
    if size > MAX_VALUE_BYTES:
        raise EverystepError(
            f"the value published under {key!r} is {size:,} bytes as JSON; the limit is "
            f"{MAX_VALUE_BYTES:,} (publish progress, and keep large results for the step's "
            "return value)"
        )
    run = frame.run
    if run.aborted is not None and not frame.in_step:
        raise run.aborted  # as every later operation of an aborted pass
    with run.publishing:
        new = key not in run.published
        if new and len(run.published) >= MAX_KEYS:
            raise _too_many_keys(run)
        if run.checking or (not frame.in_step and run.history_beyond(frame.scope.prefix)):
            # Counted, not written: a replay. What the key holds now is not known here.
            run.published.setdefault(key, None)
            return
        if run.published.get(key) == text:
            return
        # A key only replayed so far (None) may never have been stored: counted too.
        cap = MAX_KEYS if run.published.get(key) is None else None
        if not _write(run, key, stored, cap):
            raise _too_many_keys(run)
        run.published[key] = text
    if _notifies():
        _writer().changed()


def _too_many_keys(run: RunState) -> EverystepError:
    return EverystepError(
        f"run {run.run_id} publishes more than {MAX_KEYS} keys; publish() is for a "
        "few values that show progress"
    )


def _write(run: RunState, key: str, stored: Any, cap: int | None) -> bool:
    """Write the value where the module docstring says; False: refused by the cap."""
    loop = _running_loop()
    if loop is None:
        return _write_here(run.run_id, key, stored, cap)
    # Outside a worker, an async body runs on a loop that sync code started and waits
    # for (``testing.run_due()``, a replay check), its ORM work on that code's thread
    # (``offload``), on its connection: in a test, inside the test's transaction. The
    # value is written there too: anywhere else it would wait for the test's write lock
    # (SQLite) or for a row no other connection sees.
    caller = sync_caller(loop)
    if caller is not None:
        return bool(caller.submit(_write_here, run.run_id, key, stored, cap).result())
    return _writer().write(run.run_id, key, stored, cap)


def _write_here(run_id: UUID, key: str, stored: Any, cap: int | None) -> bool:
    """The write from a thread that may use the ORM."""
    conn = database.connection()
    if conn.in_atomic_block and conn.vendor != "sqlite" and not _in_a_test(conn):
        return _writer().write(run_id, key, stored, cap)
    return published.write(run_id, key, stored, cap=cap)


def _in_a_test(conn: Any) -> bool:
    """Whether ``conn``'s transaction is one a TestCase (or pytest's ``django_db``) wraps a
    test in: the run itself is in it, visible to no other connection, and the test reads
    on this one; a value written elsewhere would outlive the test's rollback."""
    return any(getattr(block, "_from_testcase", False) for block in conn.atomic_blocks)


def _notifies() -> bool:
    """Whether watchers hear of a value by NOTIFY (PostgreSQL, when enabled)."""
    return database.connection().vendor == "postgresql" and conf.notify()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


# A write for the writer thread: run id, key, encoded value, cap, and the caller's future.
_Job = tuple[UUID, str, Any, int | None, Future[bool]]


class _Writer:
    """The process's thread for values written outside their caller's transaction or
    event loop, and for the batched NOTIFY (see the module docstring)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.notify_pending = False
        self.thread = threading.Thread(target=self._run, name="everystep-publish", daemon=True)
        self.thread.start()

    def write(self, run_id: UUID, key: str, stored: Any, cap: int | None) -> bool:
        """Write on this thread's connection; return once committed (whether the cap let
        the value in), or raise what the write raised."""
        done: Future[bool] = Future()
        self.jobs.put((run_id, key, stored, cap, done))
        return done.result()

    def changed(self) -> None:
        """A value was written: watchers are to hear of it (PostgreSQL)."""
        with self.lock:
            if self.notify_pending:
                return
            self.notify_pending = True
        self.jobs.put(None)

    def _run(self) -> None:
        last_notify = 0.0
        while True:
            if self.jobs.empty() and not keeps_idle_connection():
                database.close_idle()
            job = self.jobs.get()
            if job is not None:
                self._do(job)
                continue
            # A NOTIFY is due: wait out the gap since the last one, writing meanwhile.
            wait = last_notify + NOTIFY_GAP - time.monotonic()
            while wait > 0:
                try:
                    job = self.jobs.get(timeout=wait)
                except queue.Empty:
                    break
                if job is not None:
                    self._do(job)
                wait = last_notify + NOTIFY_GAP - time.monotonic()
            with self.lock:
                self.notify_pending = False
            try:
                notify_published()
            except Exception:  # watchers poll too: a lost NOTIFY costs latency only
                database.close_broken()
            last_notify = time.monotonic()

    @staticmethod
    def _do(job: _Job) -> None:
        run_id, key, stored, cap, done = job
        try:
            try:
                written = published.write(run_id, key, stored, cap=cap)
            except StoreUnavailable:
                # This thread's connection may have been idle since before a restart of
                # the database: once more on a new one (the upsert may be repeated).
                database.close_broken()
                written = published.write(run_id, key, stored, cap=cap)
        except BaseException as exc:  # StoreUnavailable included: the caller raises it
            database.close_broken()
            done.set_exception(exc)
        else:
            done.set_result(written)


def keeps_idle_connection() -> bool:
    """Whether the writer thread keeps its connection while it has nothing to write: not
    in a test environment, whose database is dropped when the tests end, which
    PostgreSQL refuses while a connection is open to it."""
    return not conf.in_test_environment()


_writer_now: _Writer | None = None
_writer_lock = threading.Lock()


def _writer() -> _Writer:
    """This process's writer, started on first use (and again in a forked child)."""
    global _writer_now
    with _writer_lock:
        if _writer_now is None or _writer_now.pid != os.getpid():
            _writer_now = _Writer()
        return _writer_now
