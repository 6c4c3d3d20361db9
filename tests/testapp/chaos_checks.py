"""What a chaos run (``tests.testapp.chaos``) left in the database, against what it
should have: ``analyse`` gives the figures, ``problems`` the invariants they break."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tests.testapp.chaos import NAMES, TERMINAL, UNSAFE_STEP, Interruption, expected, verdict


def _epoch(moment: Any) -> float | None:
    return None if moment is None else moment.timestamp()


@dataclass
class _Facts:
    runs: list[tuple[str, str, list[Any], str, Any, Any]]  # id, name, args, status, result, error
    steps: dict[tuple[str, str], tuple[str, float, float | None]]  # status, started, recorded
    effects: list[tuple[str, str, int, float]]  # run id, step id, pid, began
    recorded_twice: int

    @property
    def unsafe_runs(self) -> set[str]:
        return {run[0] for run in self.runs if run[1] == "chaos.unsafe"}


def _facts() -> _Facts:
    from django.db.models import Count

    from everystep.models import Step, Workflow
    from tests.testapp.models import ChaosEffect

    rows = Workflow.objects.filter(name__in=NAMES).values_list(
        "id", "name", "args", "status", "result", "error"
    )
    steps = Step.objects.filter(workflow__name__in=NAMES).values_list(
        "workflow_id", "step_id", "status", "started_at", "finished_at"
    )
    twice = Step.objects.values("workflow_id", "step_id").annotate(n=Count("id")).filter(n__gt=1)
    effects = ChaosEffect.objects.values_list("run_id", "step_id", "pid", "began_at")
    return _Facts(
        runs=[(str(r[0]), *r[1:]) for r in rows],
        steps={
            (str(run), sid): (
                status,
                started.timestamp(),
                _epoch(done) if status != "started" else None,
            )
            for run, sid, status, started, done in steps
        },
        effects=[(str(run), sid, pid, began.timestamp()) for run, sid, pid, began in effects],
        recorded_twice=twice.count(),
    )


class _ByRun:
    """The interruptions that concern each run: those of the workers that held it, and
    the server restarts, which concern every run."""

    def __init__(self, interruptions: Iterable[Interruption]) -> None:
        self.everywhere: list[Interruption] = []
        self.index: dict[str, list[Interruption]] = defaultdict(list)
        for event in interruptions:
            if event.held is None:
                self.everywhere.append(event)
            for run_id in event.held or ():
                self.index[run_id].append(event)

    def get(self, run_id: str) -> list[Interruption]:
        return self.index.get(run_id, []) + self.everywhere


def analyse(interruptions: Sequence[Interruption]) -> dict[str, Any]:
    """The figures of a chaos run, from the database and the harness's interruptions."""
    facts = _facts()
    events = _ByRun(interruptions)
    figures = _outcomes(facts)
    figures.update(_executions(facts, events))
    figures.update(_blocked(facts, events))
    kinds = Counter(event.kind for event in interruptions)
    figures.update(kills=kinds["kill"], stops=kinds["stop"], restarts=kinds["restart"])
    return figures


def _outcomes(facts: _Facts) -> dict[str, Any]:
    step_rows = Counter(run for run, _ in facts.steps)
    wrong, lost = [], []
    for run_id, name, args, status, result, error in facts.runs:
        if status not in TERMINAL:
            lost.append(f"{run_id} {name} {status}")
            continue
        why = verdict(name, args, status, result, error)
        want = expected(name, args).steps - (1 if status == "blocked" else 0)
        if why is None and step_rows[run_id] != want:
            why = f"{step_rows[run_id]} step rows, expected {want}"
        if why is not None:
            wrong.append(f"{run_id} {name}{args}: {why}")
    return {
        "runs": len(facts.runs),
        "terminal": len(facts.runs) - len(lost),
        "statuses": dict(Counter(run[3] for run in facts.runs)),
        "wrong": len(wrong),
        "wrong_examples": wrong[:10],
        "lost": len(lost),
        "lost_examples": lost[:10],
        "recorded_twice": facts.recorded_twice,
    }


def _executions(facts: _Facts, events: _ByRun) -> dict[str, Any]:
    """Executions against recorded steps; every execution beyond one per recorded step
    must have been in flight when the harness interrupted its worker or the database."""
    per_step: Counter[tuple[str, str]] = Counter()
    caught: Counter[tuple[str, str]] = Counter()
    for run_id, step_id, pid, began in facts.effects:
        key = (run_id, step_id)
        per_step[key] += 1
        recorded = facts.steps.get(key, ("", 0.0, None))[2]
        if any(e.caught(pid, began, recorded) for e in events.get(run_id)):
            caught[key] += 1
    recorded = sum(1 for key in per_step if key in facts.steps)
    unexplained = {
        key: n - (1 if key in facts.steps else 0) - caught[key]
        for key, n in per_step.items()
        if n - (1 if key in facts.steps else 0) > caught[key]
    }
    unsafe = facts.unsafe_runs
    unsafe_repeats = sum(
        1 for (run, sid), n in per_step.items() if sid == UNSAFE_STEP and run in unsafe and n > 1
    )
    return {
        "executions": sum(per_step.values()),
        "recorded_steps": recorded,
        "re_executions": sum(per_step.values()) - recorded,
        "in_flight_interrupted": sum(caught.values()),
        "re_executions_unexplained": sum(unexplained.values()),
        "unexplained_examples": [_story(facts, key) for key in list(unexplained)[:10]],
        "unsafe_executed_twice": unsafe_repeats,
    }


def _story(facts: _Facts, key: tuple[str, str]) -> str:
    """A step's executions (pid, began) and its record, for a report."""
    runs = [
        f"pid {pid} at {began:.3f}" for run, sid, pid, began in facts.effects if (run, sid) == key
    ]
    status, started, recorded = facts.steps.get(key, ("unrecorded", 0.0, None))
    return (
        f"run {key[0]} step {key[1]}: executed by {', '.join(runs)}; "
        f"{status} (began {started:.3f}, recorded {recorded})"
    )


def _blocked(facts: _Facts, events: _ByRun) -> dict[str, Any]:
    """Blocked runs against unsafe steps whose execution an interruption caught; each
    blocked run's unsafe step must be ``started`` with no outcome."""
    interrupted = 0
    unsafe = facts.unsafe_runs
    for (run_id, step_id), (_, started, recorded) in facts.steps.items():
        if step_id != UNSAFE_STEP or run_id not in unsafe:
            continue
        if any(e.caught(None, started, recorded) for e in events.get(run_id)):
            interrupted += 1
    blocked = [run for run in facts.runs if run[3] == "blocked"]
    bad = []
    for run_id, _, _, _, _, error in blocked:
        status, started, _ = facts.steps.get((run_id, UNSAFE_STEP), ("missing", 0.0, None))
        if status != "started" or (error or {}).get("step_id") != UNSAFE_STEP:
            bad.append(f"{run_id}: unsafe step {status}, error {error}")
        elif not any(e.caught(None, started, None) for e in events.get(run_id)):
            bad.append(f"{run_id}: blocked, but no interruption caught its unsafe step")
    return {
        "unsafe_interrupted": interrupted,
        "blocked": len(blocked),
        "blocked_wrong": len(bad),
        "blocked_examples": bad[:10],
    }


def problems(figures: dict[str, Any]) -> list[str]:
    """Every invariant the figures break, in words; empty when all hold."""
    rules = [
        (figures["terminal"] == figures["runs"], "not every run is terminal"),
        (figures["wrong"] == 0, f"{figures['wrong']} run(s) with a wrong outcome"),
        (figures["lost"] == 0, f"{figures['lost']} run(s) lost"),
        (figures["recorded_twice"] == 0, f"{figures['recorded_twice']} step(s) recorded twice"),
        (
            figures["re_executions"] <= figures["in_flight_interrupted"],
            "more re-executions than step executions in flight at an interruption",
        ),
        (
            figures["re_executions_unexplained"] == 0,
            f"{figures['re_executions_unexplained']} re-execution(s) no interruption explains",
        ),
        (figures["unsafe_executed_twice"] == 0, "an unsafe step body ran twice"),
        (figures["blocked_wrong"] == 0, f"{figures['blocked_wrong']} blocked run(s) unexplained"),
        (
            figures["blocked"] <= figures["unsafe_interrupted"],
            "more blocked runs than interrupted unsafe steps",
        ),
    ]
    return [message for holds, message in rules if not holds]
