"""Run the demo: migrate the embedded SQLite database, schedule sample workflows and
run them to an outcome, then print what was recorded."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    sys.path.insert(0, str(HERE))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
    import django

    django.setup()
    from demo_orders.workflows import place_order, sync_catalogue
    from django.core.management import call_command

    from everystep import schedule
    from everystep.testing import run_due

    call_command("migrate", verbosity=0)
    schedule(place_order, 1, ["book", "lamp"], 4_500)
    schedule(place_order, 2, ["car"], 2_500_000)
    schedule(sync_catalogue, 3)
    schedule(sync_catalogue, 5)
    for run in run_due(runner="demo"):
        print(f"{run.name:24} {run.status:10} {run.id}")
        for step in run.steps.order_by("started_at"):
            print(f"    {step.step_id:18} {step.status:8} {step.name}")
        if run.result is not None:
            print(f"    result: {run.result}")
        if run.error is not None:
            print(f"    error:  {run.error['type']}: {run.error['message']}")
    print(f"\ndatabase: {django.conf.settings.DATABASES['default']['NAME']}")


if __name__ == "__main__":
    main()
