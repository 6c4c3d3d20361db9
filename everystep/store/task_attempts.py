"""The attempts of a Django ``@task``'s run (``everystep.tasks``): Django counts one per
worker that took the task up. Here an attempt is a claim that is not a resume: the first
claim, and each claim after an interruption (a crash, a drain, an operator's requeue,
orphan recovery). A claim after the run released itself to sleep or to wait
(``suspend_run`` sets ``resumes``) continues the attempt it belongs to. Each attempt is
``{"worker", "at", "claim"}``: the runner, when it began, and the claim token now
carrying it.

Read and written at the start of a task run's pass only: other runs pay nothing.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from everystep.models import Workflow
from everystep.store.guard import guarded
from everystep.values import Claim


@guarded
def begin_attempt(claim: Claim) -> tuple[Workflow, bool] | None:
    """The run of ``claim`` as this pass starts, with the attempt recorded if this claim
    begins one (the second value: it does). None if the claim no longer holds the run."""
    run = Workflow.objects.filter(id=claim.run_id).first()
    if run is None:
        return None
    token = str(claim.token)
    previous = run.attempts or []
    last = previous[-1] if previous and isinstance(previous[-1], dict) else None
    # Not an attempt: a resume after a durable wait, or this very claim's pass run again
    # (the worker retries a pass the database interrupted, under the same claim).
    again = last is not None and last.get("claim") == token
    at = timezone.now().isoformat()
    attempts, new = next_attempts(previous, bool(run.resumes) or again, claim.runner, token, at)
    # Fenced: a claim that lost the run writes nothing, and its pass is abandoned by the
    # first fenced write after this one.
    if not Workflow.objects.held_by(claim).update(attempts=attempts, resumes=None):
        return None
    run.attempts, run.resumes = attempts, None
    return run, new


def next_attempts(
    attempts: list[Any] | None, resumes: bool | None, runner: str, token: str, at: str
) -> tuple[list[Any], bool]:
    """A task run's attempts once ``token``'s claim has recorded its own, and whether it
    began a new one: the one rule ``begin_attempt`` and the claim's SQL
    (``store.claims``) follow. ``resumes``: the claim continues the last attempt."""
    kept = list(attempts or [])
    if resumes and kept and isinstance(kept[-1], dict):
        kept[-1] = {**kept[-1], "claim": token}
        return kept, False
    return [*kept, {"worker": runner, "at": at, "claim": token}], True
