"""``manage.py everystep_check_replay [--status S …] [--workflow NAME] [--limit N] [--json]``:
before a deploy, replay the unfinished runs against the code installed here.

Exit status: 0 when every checked run replays, 1 when some would fail (each is listed
with the step id and both functions), 2 when the check could not run (bad arguments, no
database).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from everystep.management.arguments import checked_count, checked_text
from everystep.management.commands._base import EverystepCommand
from everystep.replays.check import Failure, Report, WorkflowReport, check_replay
from everystep.store.guard import UNREACHABLE
from everystep.store.replay_check import CHECKED_STATUSES
from everystep.store.runs import missing_tables

MAX_LIMIT = 10_000_000
# Failing runs listed per workflow in the text report (--json lists them all).
SHOWN_FAILURES = 20


class Command(EverystepCommand):
    tables_missing_status = 2  # 1 means "runs would fail"
    help = (
        "Replay every unfinished run (scheduled, running, blocked; a run that sleeps or "
        "waits is scheduled) against the code installed now, serving recorded outcomes "
        "and executing nothing: the replay of a run stops at its first step with no "
        "record. Writes nothing (read-only transactions), claims nothing, runs beside "
        "live workers. Lists the runs that would fail after a deploy of this code — the "
        "step id, the recorded function, the function now called — and, per patch, how "
        "many runs take its old branch. Exit status 1 if any run would fail."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--status",
            action="append",
            # The plain values: argparse shows the choices with str(), and an enum
            # member would read "Status.SCHEDULED".
            choices=[status.value for status in CHECKED_STATUSES],
            help="only runs in this status (repeat for several; default: all three)",
        )
        parser.add_argument("--workflow", metavar="NAME", help="only runs of this workflow")
        parser.add_argument(
            "--limit", type=int, metavar="N", help="check at most N runs, oldest first"
        )
        parser.add_argument("--json", action="store_true", help="the report as one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        statuses = tuple(options["status"] or CHECKED_STATUSES)
        try:
            workflow = checked_text(options["workflow"], "--workflow")
            limit = options["limit"]
            if limit is not None:
                limit = checked_count(limit, "--limit", MAX_LIMIT)
        except CommandError as exc:  # exit status 1 means "runs would fail"
            raise CommandError(str(exc), returncode=2) from None
        try:
            report = check_replay(statuses, workflow, limit)
        except UNREACHABLE as exc:
            message = missing_tables(exc) or f"the database could not be read: {exc}"
            raise CommandError(str(message), returncode=2) from None
        if options["json"]:
            self.stdout.write(json.dumps(report_json(report), indent=2))
        else:
            for line in report_lines(report):
                self.say(line)
        if report.failing:
            raise SystemExit(1)


def report_json(report: Report) -> dict[str, Any]:
    return {
        "ok": not report.failing,
        "checked": report.checked,
        "failing": report.failing,
        "truncated": report.truncated,
        "complete": report.complete,
        "workflows": [
            {
                "workflow": entry.workflow,
                "checked": entry.checked,
                "failing": [_failure_json(failure) for failure in entry.failures],
                "patches": [
                    {"change_id": change_id, "new_branch": new, "old_branch": old}
                    for change_id, (new, old) in sorted(entry.patches.items())
                ],
                "moving_on": entry.moving_on,
            }
            for entry in _sorted(report)
        ],
    }


def _failure_json(failure: Failure) -> dict[str, Any]:
    return {
        "run_id": str(failure.run_id),
        "status": failure.status,
        "step_id": failure.step_id,
        "recorded": failure.recorded,
        "called": failure.called,
        "reason": failure.reason,
    }


def report_lines(report: Report) -> list[str]:
    lines: list[str] = []
    for entry in _sorted(report):
        lines += _workflow_lines(entry, report.complete)
    more = " (stopped at --limit; more unfinished runs exist)" if report.truncated else ""
    if report.failing:
        lines.append(
            f"FAILED: {report.failing} of {report.checked} unfinished runs would fail after "
            f"a deploy of this code{more}"
        )
    else:
        lines.append(f"OK: {report.checked} unfinished runs replay against this code{more}")
    return lines


def _workflow_lines(entry: WorkflowReport, complete: bool) -> list[str]:
    failing = len(entry.failures)
    mark = "FAIL" if failing else "ok  "
    verdict = f"{failing} of {entry.checked} runs would fail" if failing else "all replay"
    lines = [f"{mark} {entry.workflow}: {entry.checked} runs checked, {verdict}"]
    for failure in entry.failures[:SHOWN_FAILURES]:
        lines.append(f"  run {failure.run_id} ({failure.status}): {_where(failure)}")
    if failing > SHOWN_FAILURES:
        lines.append(f"  … and {failing - SHOWN_FAILURES} more (--json lists every one)")
    for change_id, (new, old) in sorted(entry.patches.items()):
        if old or not complete:
            lines.append(f"  patch {change_id!r}: {old} runs take the old branch, {new} the new")
        else:
            lines.append(
                f"  patch {change_id!r}: no checked run takes the old branch "
                f"({new} the new); deprecate_patch({change_id!r}) may replace it"
            )
    if entry.moving_on:
        lines.append(
            f"  {entry.moving_on} runs take a patch's new branch at their next step: once a "
            "worker on this code records it, workers still on the code before it leave "
            "them for workers on this code"
        )
    return lines


def _where(failure: Failure) -> str:
    if failure.step_id is None:
        return failure.reason
    return (
        f"step {failure.step_id}: recorded {failure.recorded}, the code now calls {failure.called}"
    )


def _sorted(report: Report) -> list[WorkflowReport]:
    return [report.workflows[name] for name in sorted(report.workflows)]
