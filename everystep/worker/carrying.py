"""What this worker can carry on (its code version and the names of its workflows and
tasks), and saying so when due runs wait for code it does not have.

During a rolling deploy an old worker leaves a new workflow's runs, and runs whose
records show newer code, for a worker that has the code (``store.claims``). Such runs
wait, and waiting must be visible: every ``CHECK_EVERY`` seconds the heartbeat thread
counts the due runs this worker leaves (a gauge), and logs one line per name that no
live worker can carry, once until that changes.
"""

from __future__ import annotations

import logging
import time

from everystep import code_version, registry
from everystep.store import carrying as store
from everystep.values import Carrying
from everystep.worker.worker_state import WorkerState

logger = logging.getLogger("everystep.worker")

CHECK_EVERY = 30.0

_known: tuple[tuple[int, int], Carrying] | None = None


def current() -> Carrying:
    """What this process carries now: worked out again only when a workflow or task was
    registered since (a module imported late)."""
    global _known
    sizes = registry.sizes()
    if _known is None or _known[0] != sizes:
        names = (*registry.registered_names(), *registry.registered_task_names())
        _known = (sizes, Carrying(code_version.current(), names))
    return _known[1]


class WaitingRuns:
    """The heartbeat thread's check of the due runs this worker leaves."""

    def __init__(self, worker: WorkerState) -> None:
        self.worker = worker
        self.checked_at = time.monotonic()  # the first check after one interval
        self.logged: dict[str, int] = {}

    def check_if_due(self) -> None:
        if time.monotonic() - self.checked_at < CHECK_EVERY:
            return
        self.checked_at = time.monotonic()
        mine = current()
        left = store.not_carried_by(mine)
        self.worker.left_for_other_code = dict(left)
        if not left:
            self.logged.clear()
            return
        carriers = store.live_carriers()
        # Another live version that has the name may carry them: only names none has.
        others = [c for c in carriers if c is None or c.code_version != mine.code_version]
        stuck = {
            name: count
            for name, count in left.items()
            if not any(c is None or name in c.names for c in others)
        }
        for name, count in stuck.items():
            if self.logged.get(name) is None:
                logger.warning(
                    "%d due runs of %s wait for code: no live worker carries them (this "
                    "worker runs code %s); start a worker on the code that scheduled them",
                    count,
                    name,
                    mine.code_version,
                    extra={"event": "worker.runs_wait_for_code", "workflow": name, "runs": count},
                )
        self.logged = stuck
