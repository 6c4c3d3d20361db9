"""The "Where we stand" table of ``bench/README.md``, generated from ``bench/results/``.

    .venv/bin/python bench/headline_table.py [--label NAME] [--write] [--commands]

Each row's figure comes from a result line of the label named in the README's opening
marker (``<!-- headline-table label=NAME -->``; ``--label`` overrides it): for each kind
and database, the first line with that label, which is one run of ``bench/headline.sh``.
Prints the table (the machine line, then the markdown table); ``--write`` replaces what
lies between the README's two markers instead. ``--commands`` prints the commands of the
rows, one a line, which ``bench/headline.sh`` runs: the table and the script cannot
drift apart. ``tests/unit/test_bench_readme.py`` checks the README against this output.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
README = BENCH / "README.md"
RESULTS = BENCH / "results"
BEGIN = re.compile(r"<!-- headline-table label=(\S+) -->\n")
END = "<!-- /headline-table -->"
TIMES = "\N{MULTIPLICATION SIGN}"

Record = dict[str, Any]


def _compare(line: Record) -> str:
    summary = line["summary"]
    (phase,) = (v for k, v in summary.items() if k.startswith("cma_"))
    return (
        f"{phase['runs_per_s']} (**{phase['ratio_to_raw'] * 100:.1f} %** of "
        f"{summary['raw_runs_per_s']})"
    )


def _instructions(line: Record) -> str:
    mine, raw = line["everystep_instructions_per_run"], line["raw_instructions_per_run"]
    return f"**{mine / 1e6:.3f} M** ({raw / 1e6:.3f} M, {line['ratio_to_raw']:.2f}{TIMES})"


def _statements(line: Record) -> str:
    split = line["anatomy"]["split"]

    def pair(side: Record) -> str:
        return f"{side['per_step']:g} / {side['per_run_besides_steps']:g}"

    shown = pair(split["in_process"])
    return f"{shown} (at the database {pair(split['db'])})" if split["db"] else shown


def _ms(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _pickup(line: Record) -> str:
    modes = {phase["mode"]: phase for phase in line["pickup"]}
    notify, polling = modes["notify"], modes["polling"]
    return (
        f"{_ms(notify['p50_ms'])} / {_ms(notify['p99_ms'])} ms; "
        f"{_ms(polling['p50_ms'])} / {_ms(polling['p99_ms'])} ms"
    )


def _fanout(line: Record) -> str:
    summary = line["summary"]
    ratio = summary["ratio_fanout_to_independent"]
    return f"{summary['fan-out']['to_done_s']:.2f} s ({ratio:.2f}{TIMES})"


@dataclass(frozen=True)
class Row:
    """One figure of the table: which result line it reads, and how it is shown."""

    figure: str
    kind: str
    db: str
    command: str  # after ``bench/``; headline.sh adds ``--label``
    shown: Callable[[Record], str]


def _per_database(
    figure: str, kind: str, command: str, shown: Callable[[Record], str]
) -> list[Row]:
    names = {"postgres": "PostgreSQL", "mariadb": "MariaDB", "sqlite": "SQLite"}
    return [
        Row(f"{figure}: {names[db]}" if db == "postgres" else f"… {names[db]}", kind, db,
            command.format(db=db), shown)
        for db in names
    ]  # fmt: skip


ROWS = [
    *_per_database(
        "runs/s of one worker, and of the raw-SQL limit",
        "compare",
        "compare.py --db {db} --runs 500 --repeat 3 --conn-max-age 600",
        _compare,
    ),
    *_per_database(
        "client instructions per run (raw limit's)",
        "instructions",
        "instructions.py --db {db}",
        _instructions,
    ),
    *_per_database(
        "statements per executed step / per run besides steps",
        "statements",
        "statements.py --db {db}",
        _statements,
    ),
    Row(
        "pickup latency p50 / p99, PostgreSQL: NOTIFY; polling every 1 s",
        "run",
        "postgres",
        "run.py --db postgres --only pickup --samples 100",
        _pickup,
    ),
    Row(
        "1 parent gathering 1,000 children, 3 workers, PostgreSQL: time to done "
        f"({TIMES} 1,000 independent runs)",
        "fanout",
        "postgres",
        "fanout.py --db postgres",
        _fanout,
    ),
]


def first_lines(label: str, results: Path = RESULTS) -> dict[tuple[str, str], Record]:
    """The first result line of each (kind, database) with ``label``."""
    found: dict[tuple[str, str], Record] = {}
    for kind in sorted({row.kind for row in ROWS}):
        for text in (results / f"{kind}.jsonl").read_text(encoding="utf-8").splitlines():
            line = json.loads(text)
            if line.get("label") == label:
                found.setdefault((kind, line["db"]), line)
    return found


def _machine(lines: list[Record]) -> str:
    first = lines[0]["machine"]
    system, release = first["platform"].split("-")[:2]
    versions = {}
    for line in lines:
        name, version = line["machine"]["db_version"].split()[:2]
        versions.setdefault(name, version.split("-")[0])
    servers = ", ".join(f"{name} {version}" for name, version in versions.items())
    return (
        f"Machine: {first['nproc']} vCPUs, {system} {'.'.join(release.split('.')[:2])}, "
        f'Python {first["python"]}, {servers}. "Tree" is the commit measured.'
    )


def table(label: str, results: Path = RESULTS) -> str:
    """The machine line and the markdown table, from the result lines of ``label``."""
    lines = first_lines(label, results)
    missing = [f"{row.kind}/{row.db}" for row in ROWS if (row.kind, row.db) not in lines]
    if missing:
        raise SystemExit(f"no result line labelled {label!r} for {', '.join(missing)}")
    out = [
        _machine([lines[row.kind, row.db] for row in ROWS]),
        "",
        "| figure | value | command (`.venv/bin/python bench/…`) | measured |",
        "|---|---|---|---|",
    ]
    for row in ROWS:
        line = lines[row.kind, row.db]
        measured = f"{line['machine']['date'][:10]}, tree {line['source']['commit']}"
        out.append(f"| {row.figure} | {row.shown(line)} | `{row.command}` | {measured} |")
    return "\n".join(out) + "\n"


def readme_label(text: str) -> str:
    """The label named by the README's opening marker."""
    found = BEGIN.search(text)
    if found is None:
        raise SystemExit(f"{README}: no <!-- headline-table label=NAME --> marker")
    return found.group(1)


def readme_table(text: str) -> str:
    """What the README holds between its two markers."""
    found = BEGIN.search(text)
    end = text.find(END)
    if found is None or end < found.end():
        raise SystemExit(f"{README}: the headline-table markers are missing or out of order")
    return text[found.end() : end]


def write(text: str, generated: str) -> str:
    """``text`` with what lies between the markers replaced by ``generated``."""
    found = BEGIN.search(text)
    assert found is not None
    return text[: found.end()] + generated + text[text.index(END) :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", help="the result lines' label (the README marker's)")
    parser.add_argument("--write", action="store_true", help="replace the README's table")
    parser.add_argument("--commands", action="store_true", help="the rows' commands")
    parser.add_argument("--results", type=Path, default=RESULTS, metavar="DIR")
    args = parser.parse_args(argv)
    if args.commands:
        print("\n".join(row.command for row in ROWS))
        return 0
    text = README.read_text(encoding="utf-8")
    generated = table(args.label or readme_label(text), args.results)
    if args.write:
        README.write_text(write(text, generated), encoding="utf-8")
    else:
        sys.stdout.write(generated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
