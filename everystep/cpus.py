"""How many CPUs this process may use: what ``--processes auto`` starts.

Not ``os.cpu_count()``: a container limited to two CPUs (``docker run --cpus 2``, a pod's
``resources.limits.cpu: 2``) still sees every core of its host, and a worker process per
host core would have them all time-sliced into the two it is given. The limit is the
cgroup's CPU quota (v2 ``cpu.max``, else v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``),
rounded up; it is capped by the cores the process may be scheduled on (its affinity
mask: ``taskset``, ``--cpuset-cpus``), which is also the answer when there is no quota.

This module imports nothing of Django or of everystep: the runner's config check reads it
before any project is loaded.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
OWN_CGROUP = Path("/proc/self/cgroup")


@dataclass(frozen=True)
class Available:
    """The CPUs this process may use and where that figure came from."""

    count: int
    source: str  # "cgroup cpu.max 200000 100000", "affinity mask …"


def available(cgroup: Path = CGROUP, own: Path = OWN_CGROUP) -> Available:
    """The CPUs this process may use, at least 1 (``cgroup``: where the cgroup
    filesystem is mounted; ``own``: the file naming this process's cgroups)."""
    cores = _schedulable()
    quota = _quota(cgroup, own)
    if quota is not None:
        limit, source = quota
        if limit <= cores:
            return Available(max(1, limit), source)
        return Available(cores, f"affinity mask ({source} allows {limit})")
    return Available(cores, "affinity mask (no cgroup CPU quota)")


def _schedulable() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def _quota(cgroup: Path, own: Path) -> tuple[int, str] | None:
    """The quota of this process's cgroup in whole CPUs, rounded up (1.5 CPUs run two
    processes, each busy three quarters of the time), or None without one."""
    if (cgroup / "cgroup.controllers").exists():  # cgroup v2
        return _v2_quota(cgroup, own)
    for base in (cgroup / "cpu,cpuacct", cgroup / "cpu"):
        quota_text = _read(base / "cpu.cfs_quota_us")
        period_text = _read(base / "cpu.cfs_period_us")
        if quota_text is not None and period_text is not None:
            if _positive(quota_text, period_text):
                quota, period = int(quota_text), int(period_text)
                return math.ceil(quota / period), f"cgroup cpu.cfs_quota_us {quota} {period}"
            return None  # -1: no quota
    return None


def _v2_quota(cgroup: Path, own: Path) -> tuple[int, str] | None:
    """The tightest ``cpu.max`` from this process's cgroup up to the root: a quota set on
    a parent (a systemd slice, a pod) holds for every cgroup below it."""
    best: tuple[int, str] | None = None
    for folder in _v2_ancestry(cgroup, own):
        fields = (_read(folder / "cpu.max") or "").split()
        if len(fields) == 2 and _positive(fields[0], fields[1]):
            quota, period = int(fields[0]), int(fields[1])
            limit = math.ceil(quota / period)
            if best is None or limit < best[0]:
                best = (limit, f"cgroup cpu.max {quota} {period}")
    return best


def _v2_ancestry(cgroup: Path, own: Path) -> list[Path]:
    """This process's cgroup folder and its parents up to the mount
    (``/proc/self/cgroup`` says "0::/system.slice/x.service"). In a container with a
    cgroup namespace of its own it says "0::/", and the root is the container's."""
    text = _read(own) or ""
    path = next((line[3:] for line in text.splitlines() if line.startswith("0::")), "/")
    parts = [part for part in path.split("/") if part]
    return [cgroup.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _positive(*texts: str) -> bool:
    return all(text.isdigit() and int(text) > 0 for text in texts)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
