"""bench/README.md stays short and its headline table stays what the result lines say."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"
README = BENCH / "README.md"
MAX_LINES = 250


def _headline_table() -> ModuleType:
    spec = importlib.util.spec_from_file_location("headline_table", BENCH / "headline_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


def test_bench_readme_is_under_250_lines() -> None:
    """bench/README.md is under 250 lines: detail goes to bench/docs/."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < MAX_LINES, f"bench/README.md has {len(lines)} lines"


def test_headline_table_is_generated_from_the_result_lines() -> None:
    """The "Where we stand" table equals bench/headline_table.py's output for the label
    its marker names, read from bench/results/*.jsonl."""
    table = _headline_table()
    text = README.read_text(encoding="utf-8")
    assert table.readme_table(text) == table.table(table.readme_label(text))


def test_headline_sh_runs_the_tables_commands() -> None:
    """bench/headline.sh takes its commands from the table's rows, so they cannot drift."""
    table = _headline_table()
    listed = subprocess.run(
        [sys.executable, str(BENCH / "headline_table.py"), "--commands"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert listed == [row.command for row in table.ROWS]
    assert "headline_table.py --commands" in (BENCH / "headline.sh").read_text(encoding="utf-8")
