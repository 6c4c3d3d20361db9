"""Imported only by ``lazy_attributes.__getattr__``."""

from __future__ import annotations

from tests.testapp.import_marks import mark

mark(__name__)
