"""Sample workflows of the demo: an order that reserves stock, charges, and notifies."""

from __future__ import annotations

import random
import time
from typing import Any

from everystep import Terminal, parallel, step, workflow
from everystep.context import current


def _work(seconds: float = 0.2) -> None:
    time.sleep(seconds * random.uniform(0.5, 1.5))


@step
def reserve_stock(order_id: int, items: list[str]) -> dict[str, Any]:
    _work()
    return {"order": order_id, "reserved": items}


@step(unsafe_to_repeat=True)
def charge_card(order_id: int, amount_cents: int) -> str:
    ctx = current()
    # The run id is the idempotency key to give a payment provider.
    _work()
    return f"charge-{ctx.workflow_id if ctx else order_id}"


@step
def send_email(order_id: int, kind: str) -> str:
    _work(0.1)
    return f"{kind} mail sent for order {order_id}"


@step
def update_crm(order_id: int) -> bool:
    _work(0.3)
    return True


@step
def check_fraud(amount_cents: int) -> int:
    _work(0.1)
    return 90 if amount_cents > 100_000 else 5


@workflow(name="demo.place_order")
def place_order(order_id: int, items: list[str], amount_cents: int) -> dict[str, Any]:
    """Reserve, check fraud, charge, then notify and update the CRM in parallel."""
    reservation = reserve_stock(order_id, items)
    if check_fraud(amount_cents, everystep_id="fraud") > 50:
        raise Terminal("fraud score too high", {"order": order_id})
    charge = charge_card(order_id, amount_cents)
    mail, crm = parallel(
        lambda: send_email(order_id, "confirmation"),
        lambda: update_crm(order_id),
        everystep_id="notify",
    )
    return {"reservation": reservation, "charge": charge, "mail": mail, "crm": crm}


@step
def fetch_page(page: int) -> list[int]:
    _work(0.1)
    if page == 3:
        raise ConnectionError("upstream timed out on page 3")
    return list(range(page * 10, page * 10 + 10))


@workflow(name="demo.sync_catalogue")
def sync_catalogue(pages: int) -> int:
    """Fetch pages in parallel; a failing page fails the run (no built-in retries)."""
    results = parallel(*[lambda p=p: fetch_page(p, everystep_id=f"page-{p}") for p in range(pages)])
    return sum(len(r) for r in results)


@step
def render_section(name: str) -> str:
    _work(2.0)
    return f"section {name} rendered"


@workflow(name="demo.nightly_report")
def nightly_report(sections: list[str]) -> list[str]:
    """A slow sequential run, so the UI has something running to show for a while."""
    return [render_section(name, everystep_id=f"section-{name}") for name in sections]
