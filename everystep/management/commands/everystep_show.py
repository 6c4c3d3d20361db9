"""``manage.py everystep_show RUN_ID``: one run, its outcome, its parent and children,
and its steps."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser

from everystep import serde, store
from everystep.management.commands._base import EverystepCommand
from everystep.management.options import checked_run_id, wait_json, wait_text
from everystep.models import Status, Step, Workflow
from everystep.store.reports import Family, run_family, run_wait

# Step results and errors are summarised to one line of about this many characters; the
# full values are in --json.
SUMMARY = 80
# The run's own arguments, result and error get more room, but a multi-megabyte value
# still prints as one readable line.
VALUE_SUMMARY = 2000
# Child runs listed, the first started first; ``everystep_runs --parent`` lists them all.
CHILDREN_SHOWN = 20


class Command(EverystepCommand):
    help = (
        "Show one run: arguments, status (and what it waits for, if it is not due yet), "
        "result or error, timestamps, runner, the run that started it (its parent) and the "
        f"runs it started (its children: how many, and the first {CHILDREN_SHOWN}), and its "
        "steps in the order they started. --json prints all that, unabridged but for "
        "the children (their count and the first ones)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help="the run's id (a UUID)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = checked_run_id(options["run_id"])
        run = store.get_run(run_id)
        if run is None:
            raise CommandError(f"no run with id {run_id}")
        steps = store.run_steps(run.id)
        # Counted exactly: one run's children, counted once, for a human who asked.
        family = run_family(run, CHILDREN_SHOWN, cap=None)
        if options["json"]:
            self.stdout.write(json.dumps(run_detail(run, steps, family), indent=2))
        else:
            self._text(run, steps, family)

    def _text(self, run: Workflow, steps: list[Step], family: Family) -> None:
        wait = run_wait(run)
        fields = [
            ("run", str(run.id)),
            ("workflow", run.name),
            ("status", run.status),
            *([("wait", wait_text(wait, _when))] if wait is not None else []),
            *([("parent", _parent_text(family.parent))] if family.parent is not None else []),
            ("args", _cut(_json(run.args))),
            ("claimed_by", run.claimed_by or "-"),
            ("created_at", _when(run.created_at)),
            ("started_at", _when(run.started_at)),
            ("completed_at", _when(run.completed_at)),
        ]
        if run.error is not None:
            fields.append(("error", _cut(_error(run.error))))
        elif run.result is not None or run.status == Status.COMPLETED:
            fields.append(("result", _cut(_json(run.result))))
        for label, value in fields:
            self.stdout.write(f"{label:<13} {value}")
        if family.child_count:
            self._children(run, family)
        self.stdout.write(f"steps ({len(steps)}):")
        self._table([_step_cells(step) for step in steps])

    def _children(self, run: Workflow, family: Family) -> None:
        self.stdout.write(f"children ({family.child_count}):")
        self._table([[str(child.id), child.status, child.name] for child in family.children])
        more = family.child_count - len(family.children)
        if more:
            self.stdout.write(f"  … {more} more: manage.py everystep_runs --parent {run.id}")

    def _table(self, rows: list[list[str]]) -> None:
        """Indented rows, every column but the last padded, so they read as a table."""
        if not rows:
            return
        widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]) - 1)]
        for row in rows:
            padded = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
            self.stdout.write("  " + "  ".join([*padded, row[-1]]))


def run_detail(run: Workflow, steps: list[Step], family: Family) -> dict[str, Any]:
    """Everything recorded about a run, as JSON-ready values, with its parent and (the
    first of) its children."""
    return {
        "id": str(run.id),
        "name": run.name,
        "status": run.status,
        "args": run.args,
        "idempotency_key": run.idempotency_key,
        "claimed_by": run.claimed_by,
        "result": run.result,
        "error": run.error,
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "completed_at": _iso(run.completed_at),
        "due_at": _iso(run.due_at),
        "waiting_for": run.waiting_for,
        "wait": wait_json(run_wait(run)),
        "parent": None if family.parent is None else _brief(family.parent),
        "children_count": family.child_count,
        "children": [_brief(child) for child in family.children],
        "steps": [_step_detail(step) for step in steps],
    }


def _brief(run: Workflow) -> dict[str, Any]:
    return {"id": str(run.id), "name": run.name, "status": run.status}


def _parent_text(parent: Workflow) -> str:
    return f"{parent.id} {parent.name} ({parent.status})"


def _step_detail(step: Step) -> dict[str, Any]:
    return {
        "step_id": step.step_id,
        "name": step.name,
        "status": step.status,
        "started_at": _iso(step.started_at),
        "finished_at": _iso(step.finished_at),
        "duration": _duration(step),
        "result": step.result,
        "error": step.error,
    }


def _step_cells(step: Step) -> list[str]:
    duration = _duration(step)
    if step.error is not None:
        outcome = "error: " + _error(step.error)
    elif step.finished_at is None:
        # An unsafe step that started but never recorded an outcome: the reason a run
        # is blocked.
        outcome = "no outcome recorded"
    else:
        outcome = "result: " + _json(step.result)
    return [
        step.step_id,
        step.name,
        step.status,
        _when(step.started_at),
        _when(step.finished_at),
        "-" if duration is None else f"{duration:.3f}s",
        _clip(outcome),
    ]


def _duration(step: Step) -> float | None:
    if step.finished_at is None:
        return None
    return (step.finished_at - step.started_at).total_seconds()


def _error(error: Any) -> str:
    if isinstance(error, dict) and "type" in error:
        return serde.printable(f"{error['type']}: {error.get('message', '')}")
    return _json(error)


def _json(value: Any) -> str:
    # printable: a row stored before values were escaped may hold a lone surrogate
    # (SQLite took them), which a UTF-8 terminal cannot be sent.
    return serde.printable(json.dumps(value, ensure_ascii=False))


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY else text[: SUMMARY - 1] + "…"


def _cut(text: str) -> str:
    if len(text) <= VALUE_SUMMARY:
        return text
    return f"{text[: VALUE_SUMMARY - 1]}… ({len(text):,} characters; --json prints all)"


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _when(moment: datetime | None) -> str:
    return moment.isoformat(timespec="milliseconds") if moment else "-"
