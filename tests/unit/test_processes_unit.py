"""The pure parts of ``--processes`` (issue 56): the CPUs ``auto`` reads, the option's
``auto`` word, the children's names, and the merge of the children's metrics."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from everystep import cpus
from everystep.options import AUTO, BY_NAME, OptionError, resolve
from everystep.worker.merged import merge
from everystep.worker.processes import child_name

CORES = len(os.sched_getaffinity(0))


def cgroup_v2(tmp_path: Path, own: str, limits: dict[str, str]) -> tuple[Path, Path]:
    """A cgroup v2 tree under ``tmp_path`` with ``cpu.max`` per folder, and the file that
    places this process at ``own``."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    for folder, value in limits.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "cpu.max").write_text(value + "\n")
    placed = tmp_path / "self-cgroup"
    placed.write_text(f"0::{own}\n")
    return root, placed


@pytest.mark.parametrize(
    ("limits", "own", "expected"),
    [
        ({"": "100000 100000"}, "/", 1),  # a container with --cpus 1 and its own namespace
        ({"": "150000 100000"}, "/", 2),  # 1.5 CPUs: two processes (rounded up)
        ({"": "max 100000"}, "/", CORES),  # no quota: the cores it may run on
        # A quota on a parent (a slice, a pod) holds below it; the tightest wins.
        (
            {"": "max 100000", "kubepods": "100000 100000", "kubepods/pod": "max 100000"},
            "/kubepods/pod",
            1,
        ),
    ],
)
def test_auto_reads_the_cgroup_quota_not_the_hosts_cores(tmp_path, limits, own, expected):
    root, placed = cgroup_v2(tmp_path, own, limits)
    found = cpus.available(root, placed)
    assert found.count == min(expected, CORES)
    if expected < CORES:
        assert found.source.startswith("cgroup cpu.max ")


def test_auto_reads_cgroup_v1_too(tmp_path):
    base = tmp_path / "cgroup" / "cpu,cpuacct"
    base.mkdir(parents=True)
    (base / "cpu.cfs_quota_us").write_text("100000\n")
    (base / "cpu.cfs_period_us").write_text("100000\n")
    found = cpus.available(tmp_path / "cgroup", tmp_path / "none")
    assert (found.count, found.source) == (1, "cgroup cpu.cfs_quota_us 100000 100000")
    (base / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpus.available(tmp_path / "cgroup", tmp_path / "none").count == CORES


def test_processes_takes_a_count_or_auto():
    option = BY_NAME["processes"]
    assert option.check(" Auto ") == AUTO and option.parse("AUTO") == AUTO
    assert option.parse("4") == 4
    assert (
        option.expected() == "an integer from 1 to 1024, or auto" or "or auto" in option.expected()
    )
    for bad in (0, "many", True, 1.5):
        with pytest.raises(ValueError, match="or auto"):
            option.check(bad)


def test_reload_runs_one_process():
    with pytest.raises(OptionError, match="processes must be 1 with reload"):
        resolve({"processes": 2, "reload": True}, lambda _name: None)
    assert resolve({"processes": 1, "reload": True}, lambda _name: None)["processes"] == 1


def test_child_names_derive_from_the_group_name():
    assert [child_name("w", i) for i in range(3)] == ["w", "w/1", "w/2"]


CHILD = """\
# HELP everystep_worker_inflight Runs in flight now.
# TYPE everystep_worker_inflight gauge
everystep_worker_inflight{{runner="{name}"}} {inflight}
# HELP everystep_worker_started_at_seconds Unix time the worker started.
# TYPE everystep_worker_started_at_seconds gauge
everystep_worker_started_at_seconds{{runner="{name}"}} {started}
# HELP everystep_workflow_runs_total Runs finished.
# TYPE everystep_workflow_runs_total counter
everystep_workflow_runs_total{{status="completed",workflow="w"}} {done}
everystep_workflow_runs_created{{status="completed",workflow="w"}} {started}
# HELP everystep_workflows_pending Runs due.
# TYPE everystep_workflows_pending gauge
everystep_workflows_pending 7.0
"""


def test_the_merged_scrape_sums_the_children_under_the_groups_name():
    texts = [
        CHILD.format(name="g", inflight=2, started=100.0, done=5),
        CHILD.format(name="g/1", inflight=3, started=90.0, done=6),
    ]
    merged = merge(texts, "g", {"g", "g/1"}).decode()
    assert 'everystep_worker_inflight{runner="g"} 5.0' in merged
    assert 'everystep_worker_started_at_seconds{runner="g"} 90.0' in merged, "the earliest"
    assert 'everystep_workflow_runs_total{status="completed",workflow="w"} 11.0' in merged
    assert "everystep_workflows_pending 7.0" in merged, "read alike by each: taken once"
    assert "g/1" not in merged
