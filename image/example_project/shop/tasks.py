"""An example Django task run by the image's worker (everystep.tasks): the task function
is a durable workflow body, so the step it calls is recorded once."""

from __future__ import annotations

from everystep import step

try:  # Django 6
    from django.tasks import task
except ImportError:  # Django 5.2, as the image ships: the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]


@step
def receipt(order_id: int) -> str:
    return f"receipt-{order_id}"


@task
def send_receipt(order_id: int, *, channel: str = "mail") -> str:
    return f"{channel}:{receipt(order_id)}"
