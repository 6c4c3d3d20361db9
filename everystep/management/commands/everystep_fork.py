"""``manage.py everystep_fork RUN_ID [--from-step ID] [--args JSON]``: re-run a finished
run from a step, under the code installed now (``everystep.fork``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from everystep.engine.rerun import fork_run
from everystep.errors import EverystepError
from everystep.management.commands._base import EverystepCommand
from everystep.management.options import checked_json, checked_run_id, checked_text
from everystep.store.audit import Actor

_JSON_KINDS = {dict: "object", str: "string", int: "number", float: "number", bool: "boolean"}


class Command(EverystepCommand):
    help = (
        "Fork a finished run: a new scheduled run of the same workflow that starts with "
        "copies of the original's records made before --from-step (default: the first "
        "step that failed or has no outcome), so only the work from there on executes, "
        "under the code installed now. The original is left as it was. Refused, with the "
        "reason and nothing written, when the fork would fail on replay."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", help="the finished run's id (a UUID)")
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
            help="new arguments for the fork, as a JSON array",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = checked_run_id(options["run_id"])
        from_step = checked_text(options["from_step"], "--from-step")
        new_args = None
        if options["new_args"] is not None:
            new_args = checked_json(options["new_args"], "--args")
            if not isinstance(new_args, list):
                raise CommandError(
                    "--args must be a JSON array of the workflow's arguments, "
                    f"not a JSON {_JSON_KINDS.get(type(new_args), 'value')}"
                )
        try:
            fork = fork_run(
                run_id, from_step=from_step, args=new_args, actor=Actor.command("everystep_fork")
            )
        except EverystepError as exc:
            raise CommandError(str(exc)) from None
        start = f"from step {fork.forked_from_step}" if fork.forked_from_step else "to replay"
        self.stdout.write(f"run {run_id} forked as run {fork.id} ({fork.name}), scheduled {start}")
