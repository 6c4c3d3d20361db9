"""``manage.py everystep_requeue_runner NAME``: requeue the runs of a dead runner."""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from django.core.management.base import CommandError, CommandParser

from everystep import conf
from everystep.management.arguments import checked_text, shown
from everystep.management.commands._base import EverystepCommand
from everystep.store.audit import Actor
from everystep.store.runners import get_runner, known_runner_names, requeue_runner

logger = logging.getLogger("everystep.ops")


class Command(EverystepCommand):
    help = (
        "Put every run left 'running' under runner NAME back to 'scheduled' so any worker "
        "resumes it. Refused while NAME still sends heartbeats, unless --force."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the dead runner's name")
        parser.add_argument(
            "--force", action="store_true", help="requeue even if the runner's heartbeat is recent"
        )
        parser.add_argument("--reason", default="", help="why, kept in the audit entry")

    def handle(self, *args: Any, **options: Any) -> None:
        name = checked_text(options["name"], "the runner name")
        runner = get_runner(name)
        if runner is None:
            _check_known(name)
        if (
            runner is not None
            and not options["force"]
            and runner.may_be_alive(
                conf.worker_default("orphan_timeout"), conf.worker_default("heartbeat")
            )
        ):
            raise CommandError(
                f"runner {shown(name)} sent a heartbeat {runner.seconds_silent():.0f}s ago and may "
                "be alive; stop it first, or use --force if you are sure it is dead"
            )
        actor = Actor.command("everystep_requeue_runner")
        reason = checked_text(options["reason"], "--reason")
        ids = requeue_runner(name, actor=actor, reason=reason)
        _log(name, ids, actor)
        for run_id in ids:
            self.say(str(run_id))
        self.say(f"requeued {len(ids)} run(s) held by {shown(name)}")


# Names listed in the "unknown runner" message; more would bury the message.
LISTED_NAMES = 10


def _check_known(name: str) -> None:
    """Refuse a name no runner has: a typo would otherwise report "requeued 0 run(s)"."""
    known = known_runner_names()
    if name in known:
        return
    if not known:
        also = "no runner has a heartbeat row or a running run"
    elif len(known) <= LISTED_NAMES:
        also = f"known runners: {', '.join(shown(other) for other in known)}"
    else:
        also = f"{len(known)} runners are known; see everystep_runs --status running"
    raise CommandError(
        f"unknown runner {shown(name)}: no heartbeat row and no running run under that "
        f"name ({also})"
    )


def _log(name: str, ids: list[UUID], actor: Actor) -> None:
    logger.info(
        "runner %s: requeue of its %d run(s) by %s",
        name,
        len(ids),
        actor.by,
        extra={
            "event": "ops.requeue_runner",
            "runner": name,
            "run_ids": [str(run_id) for run_id in ids],
            "user": actor.name,
        },
    )
