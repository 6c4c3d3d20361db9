"""What all of everystep's tables share: their manager and their abstract base, both bound
to everystep's database alias."""

from __future__ import annotations

from typing import Any

from django.db import models

from everystep import conf


class OwnDatabaseManager(models.Manager[Any]):
    """A manager whose querysets name everystep's alias (``EVERYSTEP_DATABASE``), so a
    project's router never sends an everystep read to a replica, or a write elsewhere.
    An alias given explicitly (``db_manager``, Django's deletion collector) still wins."""

    def get_queryset(self) -> models.QuerySet[Any]:
        queryset = super().get_queryset()
        return queryset if self._db else queryset.using(conf.database())


class EverystepModel(models.Model):
    """The base of everystep's tables: every query and write goes to everystep's alias,
    whatever a router says."""

    objects = OwnDatabaseManager()

    class Meta:
        abstract = True
        # Forward relations (``step.workflow``) and ``refresh_from_db`` go through the base
        # manager; Django takes a model's from its first parent's, so naming it here pins
        # them without an option on each table (which a migration would have to record).
        base_manager_name = "objects"

    def save(self, *args: Any, using: str | None = None, **kwargs: Any) -> None:
        # Model.save asks the router, not the manager, where an instance goes.
        super().save(*args, using=using or conf.database(), **kwargs)

    def delete(
        self, using: str | None = None, keep_parents: bool = False
    ) -> tuple[int, dict[str, int]]:
        return super().delete(using=using or conf.database(), keep_parents=keep_parents)
