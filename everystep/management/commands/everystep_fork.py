"""``manage.py everystep_fork RUN_ID [--from-step ID] [--args JSON]``: re-run a finished
run from a step, under the code installed now (``everystep.fork``); or, with the runs
list's filters instead of an id, every finished run they match."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from everystep.errors import EverystepError
from everystep.management.arguments import (
    RUN_ID_HELP,
    add_filter_arguments,
    batch_size,
    checked_json,
    checked_text,
    dry_run,
    run_or_filter,
    runs_text,
)
from everystep.management.commands._base import EverystepCommand
from everystep.replays.bulk_fork import bulk_fork
from everystep.replays.fork import fork_run
from everystep.store import bulk
from everystep.store.audit import Actor
from everystep.store.forks import BUILTIN_WORKFLOWS

_JSON_KINDS = {dict: "object", str: "string", int: "number", float: "number", bool: "boolean"}


class Command(EverystepCommand):
    help = (
        "Fork a finished run: a new scheduled run of the same workflow that starts with "
        "copies of the original's records made before --from-step (default: the first "
        "step that failed or has no outcome), so only the work from there on executes, "
        "under the code installed now. The original is left as it was. Refused, with the "
        "reason and nothing written, when the fork would fail on replay. With filter "
        "flags instead of a run id: every finished run they match, one fork each, in "
        "batches (--dry-run prints how many); a run whose fork is refused is counted and "
        "skipped. Runs of everystep's own workflows (everystep.bulk_action) are never "
        "forked: by id it is refused, by filter they are left out and counted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", nargs="?", help=f"the finished run's id ({RUN_ID_HELP})")
        parser.add_argument(
            "--from-step",
            metavar="ID",
            help="the recorded step to execute again, and everything after it (e.g. 2)",
        )
        parser.add_argument(
            "--args",
            # Not "args": Django passes a command's positional arguments under that name.
            dest="new_args",
            metavar="JSON",
            help="new arguments for the fork, as a JSON array (one run only)",
        )
        add_filter_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        target = run_or_filter(options)
        from_step = checked_text(options["from_step"], "--from-step")
        actor = Actor.command("everystep_fork")
        if isinstance(target, bulk.RunFilter):
            if options["new_args"] is not None:
                raise CommandError("--args replaces one run's arguments: give a run id with it")
            self._bulk(target, actor, from_step, options)
            return
        new_args = _new_args(options["new_args"])
        try:
            fork = fork_run(target, from_step=from_step, args=new_args, actor=actor)
        except EverystepError as exc:
            raise CommandError(str(exc)) from None
        start = f"from step {fork.forked_from_step}" if fork.forked_from_step else "to replay"
        self.say(f"run {target} forked as run {fork.id} ({fork.name}), scheduled {start}")

    def _bulk(
        self,
        run_filter: bulk.RunFilter,
        actor: Actor,
        from_step: str | None,
        options: dict[str, Any],
    ) -> None:
        size = batch_size(options)
        counted = dry_run(options, run_filter, "fork")
        if counted is not None:
            self.say(counted)
            self._say_skipped(bulk.builtin_matches(run_filter))
            return
        done = bulk_fork(run_filter, actor, batch_size=size, from_step=from_step)
        self.say(f"forked {runs_text(done.forked)} (filter {run_filter})")
        self._say_skipped(done.skipped)
        if done.refused:
            self.say(f"refused {runs_text(done.refused)}, for example:")
            for reason in done.reasons:
                self.say(f"  {reason}")

    def _say_skipped(self, skipped: int) -> None:
        if skipped:
            self.say(
                f"left out {runs_text(skipped)} of everystep's own workflows "
                f"({', '.join(sorted(BUILTIN_WORKFLOWS))}): they cannot be forked; start "
                "a new bulk action instead"
            )


def _new_args(text: str | None) -> list[Any] | None:
    if text is None:
        return None
    value = checked_json(text, "--args")
    if not isinstance(value, list):
        kind = _JSON_KINDS.get(type(value), "value")
        raise CommandError(f"--args must be a JSON array of the workflow's arguments, not a {kind}")
    return value
