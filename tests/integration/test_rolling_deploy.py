"""A rolling deploy under load, short (``tests.rolling_deploy``; the full one is
``bench/rolling_deploy.py``): three real workers replaced one by one by SIGTERM, from
the old code tree to the new, while web processes of both versions schedule runs of a
workflow the old code lacks, of one the new code changed behind a patch, some sleeping
across the deploy."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.code_trees import make_tree
from tests.rolling_deploy import roll

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_rolling_deploy_fails_loses_and_repeats_nothing(tmp_path: Path):
    old = make_tree(tmp_path / "old", new=False)
    new = make_tree(tmp_path / "new", new=True)
    outcome = roll(old, new, tmp_path, runs=120, workers=3, pause=2.0, gap=1.5, timeout=120)
    assert (outcome.failed, outcome.unfinished, outcome.executed_twice) == (0, 0, 0), (
        outcome.line(),
        outcome.failures,
    )
    assert outcome.completed == outcome.runs == 120
