"""Example workflows; the runner imports this module at start-up (autodiscovery)."""

from __future__ import annotations

import time

from everystep import parallel, step, workflow


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
