"""The same small task on both backends, and on everystep one that calls a durable step."""

from django.tasks import task

from everystep import step


@step
def doubled(i: int) -> int:
    return 2 * i


@task
def everystep_plain(i: int) -> int:
    return i + 1


@task
def everystep_step(i: int) -> int:
    return doubled(i) + 1


@task(backend="db")
def db_plain(i: int) -> int:
    return i + 1
