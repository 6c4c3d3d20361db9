"""``manage.py everystep_prune --older-than DAYS``: delete old finished runs and their steps."""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from everystep.management.arguments import checked_count, checked_text, clipped, shown
from everystep.management.commands._base import EverystepCommand
from everystep.models import FINAL_STATUSES, AuditEntry
from everystep.store import audit
from everystep.store.audit import Actor
from everystep.store.prune import prunable_counts, prunable_sample, prune_batch

logger = logging.getLogger("everystep.ops")

FINAL: list[str] = sorted(str(status) for status in FINAL_STATUSES)
SAMPLE = 20
# One batch is one transaction holding its rows' locks: keep it short.
MAX_BATCH = 100_000


class Command(EverystepCommand):
    help = (
        "Delete runs that reached a final status (completed, failed, stopped, cancelled) "
        "more than DAYS ago, with their steps and the audit entries that name them, in "
        "batches of short transactions; then the audit entries older than DAYS that name "
        "no single run (bulk actions, a runner's runs, earlier prunes). Scheduled, running "
        "and blocked runs are never deleted. Each prune is itself an audit entry."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            required=True,
            metavar="DAYS",
            help="delete runs completed more than DAYS ago (a positive number, e.g. 30 or 0.5)",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=1000,
            metavar="N",
            help="runs deleted per transaction (default 1000)",
        )
        parser.add_argument(
            "--status",
            nargs="+",
            action="extend",
            metavar="STATUS",
            help=f"only runs with these final statuses ({', '.join(FINAL)}; default all)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="report what would be deleted; delete nothing"
        )
        parser.add_argument("--reason", default="", help="why, kept in the audit entry")

    def handle(self, *args: Any, **options: Any) -> None:
        days = _days(options["older_than"])
        cutoff = _cutoff(days, options["older_than"])
        statuses = _statuses(options["status"])
        batch_size = checked_count(options["batch_size"], "--batch-size", MAX_BATCH)
        self.verbosity = options["verbosity"]
        if options["dry_run"]:
            self._report(cutoff, statuses)
            return
        entry = audit.record(
            "prune",
            Actor.command("everystep_prune"),
            filter={"older_than_days": days, "statuses": statuses},
            count=0,
            reason=checked_text(options["reason"], "--reason"),
        )
        self._prune(cutoff, statuses, batch_size, entry)

    def _report(self, cutoff: datetime, statuses: list[str]) -> None:
        counts = prunable_counts(cutoff, statuses)
        when = cutoff.isoformat(timespec="seconds")
        self.say(f"dry run: {sum(counts.values())} run(s) completed before {when}")
        for status, count in counts.items():
            self.say(f"  {status}: {count}")
        sample = prunable_sample(cutoff, statuses, SAMPLE)
        if sample:
            self.say(f"first {len(sample)} (oldest ids first):")
        for run in sample:
            completed = run.completed_at.isoformat(timespec="seconds") if run.completed_at else "-"
            self.say(f"  {run.id}  {run.status:<9}  {completed}  {run.name}")
        self.say(f"and {audit.prunable(cutoff)} audit entr(ies) naming no single run")

    def _prune(
        self, cutoff: datetime, statuses: list[str], batch_size: int, entry: AuditEntry
    ) -> None:
        # One transaction per batch, so locks are held for one batch at a time and a
        # worker writing meanwhile never waits behind the whole prune.
        total_runs = total_steps = batches = 0
        after = None
        while True:
            runs, steps, after = prune_batch(cutoff, statuses, batch_size, after=after, entry=entry)
            if not runs:
                break
            batches += 1
            total_runs += runs
            total_steps += steps
            if self.verbosity >= 2:
                self.say(f"batch {batches}: {runs} run(s), {steps} step(s)")
        self.say(f"deleted {total_runs} run(s) and {total_steps} step(s) in {batches} batch(es)")
        entries = audit.prune(cutoff, keep=entry)
        self.say(f"deleted {entries} audit entr(ies) naming no single run")
        _log(entry, total_runs, entries)


def _log(entry: AuditEntry, runs: int, entries: int) -> None:
    logger.info(
        "prune by %s: %d run(s) and %d audit entr(ies) deleted",
        entry.actor,
        runs,
        entries,
        extra={"event": "ops.prune", "runs": runs, "audit_entries": entries, "user": entry.actor},
    )


def _days(raw: Any) -> float:
    try:
        days = float(raw)
    except (TypeError, ValueError):
        raise CommandError(f"--older-than must be a number of days, not {shown(raw)}") from None
    if not math.isfinite(days) or days <= 0:
        raise CommandError(f"--older-than must be a positive number of days, not {shown(raw)}")
    return days


def _cutoff(days: float, raw: Any) -> datetime:
    try:
        return timezone.now() - timedelta(days=days)
    except OverflowError:
        raise CommandError(f"--older-than {shown(raw)} reaches before year 1") from None


def _statuses(requested: list[str] | str | None) -> list[str]:
    if not requested:
        return FINAL
    if isinstance(requested, str):  # call_command(..., status="failed")
        requested = [requested]
    refused = [status for status in requested if status not in FINAL_STATUSES]
    if refused:
        raise CommandError(
            f"cannot prune status {', '.join(map(clipped, refused))}: only final statuses "
            f"({', '.join(FINAL)}) are pruned"
        )
    return sorted(set(requested))
