"""Example workflows; the runner imports this module at start-up (autodiscovery)."""

from __future__ import annotations

import time

from everystep import parallel, publish, step, workflow

# The import's workflow name: shop/views.py serves the progress of these runs only.
IMPORT = "shop.import_catalogue"


@step
def reserve(order_id: int) -> str:
    return f"reserved-{order_id}"


@step
def pause(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@step
def notify(order_id: int, channel: str) -> str:
    return f"{channel}:{order_id}"


@workflow(name="shop.fulfil")
def fulfil(order_id: int, wait: float = 0.0) -> list[str]:
    reservation = reserve(order_id)
    pause(wait)
    mail, sms = parallel(lambda: notify(order_id, "mail"), lambda: notify(order_id, "sms"))
    return [reservation, mail, sms]


@step
def import_rows(total: int, pause: float) -> int:
    """Import ``total`` rows (here a short sleep each), publishing how far it got every
    few rows: a value published from a step is visible to watchers when publish returns."""
    for done in range(1, total + 1):
        time.sleep(pause)
        if done % 5 == 0 or done == total:
            publish("import", {"done": done, "total": total})
    return total


@workflow(name=IMPORT)
def import_catalogue(total: int = 100, pause: float = 0.05, owner: int | None = None) -> int:
    # ``owner``: the user who started it (shop/views.py streams it to that user only).
    # From the body, replay-safe: a later pass of this run does not publish it again.
    publish("import", {"done": 0, "total": total})
    return import_rows(total, pause)
