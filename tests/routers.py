"""The database router of the several-databases test mode (``EVERYSTEP_TEST_ALIAS``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings


class ReadReplicaRouter:
    """A project's router as many are: reads to a replica, writes to the primary, here for
    everystep's models (the project's own reads stay on "default": a test's rows there
    are not visible through a mirror's connection). everystep's tables are migrated only
    on its own alias, so an everystep statement that follows this router finds no table."""

    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return "replica" if model._meta.app_label == "everystep" else None

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        return "default" if model._meta.app_label == "everystep" else None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        # Tests build rows from instances (``Step(workflow=run)``): the new row's alias is
        # the router's write alias until saved. everystep itself relates rows by id.
        both = {obj1._meta.app_label, obj2._meta.app_label} == {"everystep"}
        return True if both else None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        ours = db == settings.EVERYSTEP_DATABASE
        return ours if app_label == "everystep" else not ours
