"""``manage.py everystep_runs``: list the most recent runs, newest first."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID

from django.core.management.base import CommandError, CommandParser

from everystep.management.arguments import (
    checked_count,
    checked_run_id,
    checked_text,
    shown,
    wait_json,
    wait_text,
)
from everystep.management.commands._base import EverystepCommand
from everystep.models import Status, Workflow
from everystep.safe_text import escape_controls
from everystep.store.carrying import waiting_for_code
from everystep.store.reports import list_runs, run_wait

# More rows than anyone reads in a terminal, and far below what LIMIT takes.
MAX_LIMIT = 1_000_000


class Command(EverystepCommand):
    help = (
        "List the most recent runs, newest first: id, status, workflow, runner, created and "
        "completed times, and for runs that are not due yet what they wait for (a last "
        "column, present when one does). --parent lists the runs one run's body started. "
        "--json prints one JSON object per line. Due runs that no live worker can carry "
        "(their code is not a live worker's) are counted on stderr."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--status", help=f"only runs in this status ({', '.join(Status)})")
        parser.add_argument("--name", metavar="WORKFLOW_NAME", help="only runs of this workflow")
        parser.add_argument("--runner", metavar="NAME", help="only runs claimed by this runner")
        parser.add_argument(
            "--parent", metavar="RUN_ID", help="only the child runs this run's body started"
        )
        parser.add_argument(
            "--limit", type=int, default=50, metavar="N", help="at most N runs (default 50)"
        )
        parser.add_argument("--json", action="store_true", help="one JSON object per line")

    def handle(self, *args: Any, **options: Any) -> None:
        status = options["status"]
        if status is not None and status not in Status.values:
            raise CommandError(f"unknown status {shown(status)}; valid: {', '.join(Status.values)}")
        runs = list_runs(
            status=status,
            name=checked_text(options["name"], "--name"),
            runner=checked_text(options["runner"], "--runner"),
            parent=_parent(options["parent"]),
            limit=checked_count(options["limit"], "--limit", MAX_LIMIT),
        )
        if options["json"]:
            for run in runs:
                self.stdout.write(json.dumps(run_summary(run)))
        else:
            self._table(runs)
        # On stderr: the listing on stdout keeps its form for scripts.
        for waiting in waiting_for_code():
            self.stderr.write(
                f"{waiting.count} due run(s) of {escape_controls(waiting.name)} wait for code "
                f"no live worker has: {escape_controls(waiting.why)}"
            )

    def _table(self, runs: list[Workflow]) -> None:
        header = ["id", "status", "name", "claimed_by", "created_at", "completed_at"]
        rows = [_row(run) for run in runs]
        waits = [_wait(run) for run in runs]
        # The wait is a last column, there only when a listed run waits: the first six
        # columns stay the same for scripts, and the wait's words end the line.
        if any(waits):
            header.append("wait")
            rows = [[*row, wait or "-"] for row, wait in zip(rows, waits, strict=True)]
        rows.insert(0, header)
        # Escaped before they are measured: "\x1b" takes four columns, ESC none.
        rows = [[escape_controls(cell) for cell in row] for row in rows]
        # Columns padded to their widest cell, so the output reads as a table and still
        # splits on whitespace for awk and friends.
        widths = [max(len(row[col]) for row in rows) for col in range(len(header))]
        for row in rows:
            cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            self.say("  ".join(cells).rstrip())


def _parent(value: str | None) -> UUID | None:
    return None if value is None else UUID(checked_run_id(value))


def run_summary(run: Workflow) -> dict[str, Any]:
    """The listing's fields of a run, as JSON-ready values; ``parent`` only for a child
    run, ``wait`` only for a run that is not due yet."""
    summary = {
        "id": str(run.id),
        "status": run.status,
        "name": run.name,
        "claimed_by": run.claimed_by,
        "created_at": _iso(run.created_at),
        "completed_at": _iso(run.completed_at),
    }
    if run.parent_id is not None:
        summary["parent"] = str(run.parent_id)
    wait = wait_json(run_wait(run))
    return summary if wait is None else summary | {"wait": wait}


def _row(run: Workflow) -> list[str]:
    return [
        str(run.id),
        run.status,
        run.name,
        run.claimed_by or "-",
        _when(run.created_at),
        _when(run.completed_at),
    ]


def _wait(run: Workflow) -> str | None:
    wait = run_wait(run)
    return None if wait is None else wait_text(wait, _when)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _when(moment: datetime | None) -> str:
    return moment.isoformat(timespec="seconds") if moment else "-"
