"""``manage.py everystep_worker``: parse and validate the flags, then run a ``Worker``."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from everystep.errors import EverystepError
from everystep.worker import Worker


class Command(BaseCommand):
    help = "Claim due everystep runs and execute them until SIGTERM/SIGINT, then drain."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pool", type=int, default=4, help="max runs in flight (4)")
        parser.add_argument(
            "--poll", type=float, default=0.2, help="seconds between claim polls (0.2)"
        )
        parser.add_argument(
            "--name",
            default=None,
            help="runner name: unique among live workers, stable across "
            "restarts (default: the hostname)",
        )
        parser.add_argument(
            "--drain",
            type=float,
            default=30,
            help="seconds to wait for in-flight steps at shutdown; 0 waits indefinitely (30)",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=0,
            help="port for metrics and health endpoints; 0 = off (0)",
        )
        parser.add_argument(
            "--metrics-bind", default="0.0.0.0", help="address for the metrics port (0.0.0.0)"
        )
        parser.add_argument(
            "--no-notify",
            action="store_true",
            help="PostgreSQL: do not LISTEN for new runs; poll only",
        )
        parser.add_argument(
            "--heartbeat",
            type=float,
            default=None,
            help="seconds between heartbeats (default: EVERYSTEP_HEARTBEAT, 5)",
        )
        parser.add_argument(
            "--orphan-timeout",
            type=float,
            default=None,
            help="requeue the runs of runners silent this long; 0 = never "
            "(default: EVERYSTEP_ORPHAN_TIMEOUT, 60)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            worker = Worker(
                pool_size=options["pool"],
                poll=options["poll"],
                name=options["name"],
                drain=options["drain"],
                metrics_port=options["metrics_port"],
                metrics_bind=options["metrics_bind"],
                notify=False if options["no_notify"] else None,
                heartbeat=options["heartbeat"],
                orphan_timeout=options["orphan_timeout"],
            )
        except ValueError as exc:
            raise CommandError(f"invalid option: {exc}") from None
        try:
            clean = worker.run()
        except EverystepError as exc:
            raise CommandError(str(exc)) from None
        if not clean:
            # Steps still executing past the drain deadline were requeued; exiting
            # normally would wait for their threads, so leave now.
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
