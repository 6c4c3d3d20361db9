"""everystep's database (``EVERYSTEP_DATABASE``): its connection and its transactions.

Every raw statement and transaction of everystep goes through these, and every ORM query
through the models' managers (``everystep.models.OwnDatabaseManager``), so a project's
router never sends one elsewhere.
"""

from __future__ import annotations

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from everystep import conf


def connection() -> BaseDatabaseWrapper:
    """This thread's connection to everystep's alias."""
    return connections[conf.database()]


def atomic(*, savepoint: bool = True, durable: bool = False) -> transaction.Atomic:
    """``transaction.atomic`` on everystep's alias."""
    return transaction.atomic(using=conf.database(), savepoint=savepoint, durable=durable)


def set_rollback() -> None:
    """Mark the innermost ``atomic()`` on everystep's alias for rollback."""
    transaction.set_rollback(True, using=conf.database())
