"""A module that ends the process when imported (``SystemExit``): neither a task run's
name nor the start-up's imports may let it end a worker without a word."""

from __future__ import annotations

from tests.testapp.import_marks import mark

mark(__name__)

raise SystemExit(3)
