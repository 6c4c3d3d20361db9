"""``manage.py everystep_show RUN_ID``: one run, its outcome, the values it published,
its parent and children, and its steps."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser

from everystep import safe_text
from everystep.failure_detail import stopped_at
from everystep.management.arguments import RUN_ID_HELP, checked_run_id, wait_json, wait_text
from everystep.management.commands._base import EverystepCommand
from everystep.models import Status, Step, Workflow
from everystep.store import published
from everystep.store.lineage import Lineage, run_lineage
from everystep.store.reports import Family, run_family, run_steps, run_wait
from everystep.store.runs import get_run
from everystep.task_runs import split_call

# Step results and errors are summarised to one line of about this many characters; the
# full values are in --json.
SUMMARY = 80
# The run's own arguments, result and error get more room, but a multi-megabyte value
# still prints as one readable line.
VALUE_SUMMARY = 2000
# Child runs listed, the first started first; ``everystep_runs --parent`` lists them all.
CHILDREN_SHOWN = 20
# Forks listed, the first made first.
FORKS_SHOWN = 20


class Command(EverystepCommand):
    help = (
        "Show one run: arguments, status (and what it waits for, if it is not due yet), "
        "result or error (with its traceback), where a blocked or stopped run stopped, "
        "timestamps, runner, the values it published (everystep.publish), the run that "
        "started it (its parent) and the runs it started "
        f"(its children: how many, and the first {CHILDREN_SHOWN}), the run it was forked "
        f"from and its forks (the first {FORKS_SHOWN}), and its steps in the order they "
        "started (a settled step: who settled it and when), then the tracebacks of its "
        "failed steps. --json prints all that, unabridged but for the children and forks "
        "(the first ones)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help=f"the run's id ({RUN_ID_HELP})")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = checked_run_id(options["run_id"])
        run = get_run(run_id)
        if run is None:
            raise CommandError(f"no run with id {run_id}")
        steps = run_steps(run.id)
        # Counted exactly: one run's children, counted once, for a human who asked.
        family = run_family(run, CHILDREN_SHOWN, cap=None)
        lineage = run_lineage(run, FORKS_SHOWN)
        values = published.snapshot(run, decode=False) or {}  # stored forms, as results
        if options["json"]:
            detail = run_detail(run, steps, family, lineage)
            detail["published"] = dict(sorted(values.items()))
            self.stdout.write(json.dumps(detail, indent=2))
        else:
            self._text(run, steps, family, lineage, values)

    def _text(
        self,
        run: Workflow,
        steps: list[Step],
        family: Family,
        lineage: Lineage,
        values: dict[str, Any],
    ) -> None:
        wait = run_wait(run)
        where = _stopped_at(run, steps)
        fields = [
            ("run", str(run.id)),
            ("workflow", run.name),
            ("status", run.status),
            *([("wait", wait_text(wait, _when))] if wait is not None else []),
            *([("parent", _parent_text(family.parent))] if family.parent is not None else []),
            *([("forked_from", _origin_text(run, lineage))] if run.forked_from_id else []),
            *([(f"{run.status}_at", f"step {where}")] if where is not None else []),
            *(_task_fields(run) if run.queue is not None else [("args", _cut(_json(run.args)))]),
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
            self.say(f"{label:<13} {value}")
            if label == "error":
                self._traceback(run.error, " " * 14)
        self._published(values)
        if family.child_count:
            self._children(run, family)
        if lineage.forks:
            self._forks(lineage)
        self.say(f"steps ({len(steps)}):")
        self._table([_step_cells(step) for step in steps])
        for step in steps:
            if _traceback(step.error):
                self.say(f"traceback of step {step.step_id}:")
                self._traceback(step.error, "    ")

    def _published(self, values: dict[str, Any]) -> None:
        """One ``key: value`` line per published key (the value as one line of JSON,
        cut as the run's own values are); nothing for a run that published none."""
        if not values:
            return
        self.say("published:")
        for key, value in sorted(values.items()):
            text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
            self.say(f"  {safe_text.escape_controls(key)}: {_cut(safe_text.escape_controls(text))}")

    def _traceback(self, error: Any, indent: str) -> None:
        """The traceback stored with ``error``, each line behind ``indent``."""
        for line in _traceback(error).splitlines():
            self.say(indent + line)

    def _forks(self, lineage: Lineage) -> None:
        self.say(f"forks ({len(lineage.forks)}{' and more' if lineage.more else ''}):")
        self._table([[str(fork.id), fork.status, fork.name] for fork in lineage.forks])

    def _children(self, run: Workflow, family: Family) -> None:
        self.say(f"children ({family.child_count}):")
        self._table([[str(child.id), child.status, child.name] for child in family.children])
        more = family.child_count - len(family.children)
        if more:
            self.say(f"  … {more} more: manage.py everystep_runs --parent {run.id}")

    def _table(self, rows: list[list[str]]) -> None:
        """Indented rows, every column but the last padded, so they read as a table."""
        if not rows:
            return
        # Escaped before they are measured: "\x1b" takes four columns, ESC none.
        rows = [[safe_text.escape_controls(cell) for cell in row] for row in rows]
        widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]) - 1)]
        for row in rows:
            padded = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
            self.say("  " + "  ".join([*padded, row[-1]]))


def run_detail(
    run: Workflow, steps: list[Step], family: Family, lineage: Lineage
) -> dict[str, Any]:
    """Everything recorded about a run, as JSON-ready values (its error with its
    ``traceback``), with its parent, (the first of) its children, the run it was forked
    from and (the first of) its forks."""
    return {
        "id": str(run.id),
        "name": run.name,
        "status": run.status,
        "args": run.args,
        "idempotency_key": run.idempotency_key,
        "queue": run.queue,
        "attempts": run.attempts,
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
        "forked_from": None if lineage.origin is None else _brief(lineage.origin),
        "forked_from_id": None if run.forked_from_id is None else str(run.forked_from_id),
        "forked_from_step": run.forked_from_step,
        "forks": [_brief(fork) for fork in lineage.forks],
        "forks_more": lineage.more,
        "stopped_at": _stopped_at(run, steps),
        "steps": [_step_detail(step) for step in steps],
    }


def _task_fields(run: Workflow) -> list[tuple[str, str]]:
    """A Django task's run: its task, queue, stored ``[args, kwargs]`` apart, attempts."""
    # Split as stored, as the run page does (not decoded: nothing a row names is imported).
    split = split_call(run.args)
    if split is not None:
        arguments = [("args", _cut(_json(split[0]))), ("kwargs", _cut(_json(split[1])))]
    else:
        arguments = [("args", _cut(_json(run.args)))]
    attempts = "; ".join(
        f"{attempt.get('worker')} at {attempt.get('at')}"
        for attempt in run.attempts or []
        if isinstance(attempt, dict)
    )
    return [
        ("task", run.name),
        ("queue", run.queue or ""),
        *arguments,
        ("attempts", _clip(attempts) or "-"),
    ]


def _brief(run: Workflow) -> dict[str, Any]:
    return {"id": str(run.id), "name": run.name, "status": run.status}


def _parent_text(parent: Workflow) -> str:
    return f"{parent.id} {parent.name} ({parent.status})"


def _origin_text(run: Workflow, lineage: Lineage) -> str:
    origin = lineage.origin
    text = f"{run.forked_from_id} (pruned)" if origin is None else _parent_text(origin)
    return text + (f" at step {run.forked_from_step}" if run.forked_from_step else "")


def _stopped_at(run: Workflow, steps: list[Step]) -> str | None:
    error = run.error if isinstance(run.error, dict) else {}
    return stopped_at(run.status, error, [step.step_id for step in steps])


def _traceback(error: Any) -> str:
    trace = error.get("traceback") if isinstance(error, dict) else None
    return safe_text.printable(trace) if isinstance(trace, str) else ""


def _step_detail(step: Step) -> dict[str, Any]:
    return {
        "step_id": step.step_id,
        "name": step.name,
        "status": step.status,
        "started_at": _iso(step.started_at),
        "finished_at": _iso(step.finished_at),
        "duration": _duration(step),
        "settled_by": step.settled_by,
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
        _took(step, duration),
        _clip(outcome),
    ]


def _took(step: Step, duration: float | None) -> str:
    if step.settled_by is not None:
        return f"settled by {safe_text.printable(step.settled_by)} at {_when(step.finished_at)}"
    return "-" if duration is None else f"{duration:.3f}s"


def _duration(step: Step) -> float | None:
    """How long the step took; None without an outcome, or with one an operator gave
    (its span is the wait for a human, not a duration)."""
    if step.finished_at is None or step.settled_by is not None:
        return None
    return (step.finished_at - step.started_at).total_seconds()


def _error(error: Any) -> str:
    if isinstance(error, dict) and "type" in error:
        return safe_text.escape_controls(f"{error['type']}: {error.get('message', '')}")
    return _json(error)


def _json(value: Any) -> str:
    # Escaped: a row stored before values were escaped may hold a lone surrogate (SQLite
    # took them), which a UTF-8 terminal cannot be sent; JSON leaves DEL, C1 and U+2028.
    return safe_text.escape_controls(json.dumps(value, ensure_ascii=False))


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
