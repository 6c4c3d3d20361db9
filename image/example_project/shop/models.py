"""The shop's permissions. Django keeps permissions per model, so the one the import pages
check hangs on a model without a table of its own."""

from __future__ import annotations

from django.db import models


class Catalogue(models.Model):
    """No table (``managed = False``): only its permission is used."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [("import_catalogue", "Can import the catalogue and follow its progress")]
