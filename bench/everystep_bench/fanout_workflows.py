"""The fan-out benchmark's parent workflow (``bench/fanout.py``, issue 19).

``bench_fanout(children, passes_file)`` starts ``children`` child runs of
``workflows.bench_three`` (the same 3-step workflow the other benchmarks run, with the
arguments ``harness.schedule_runs`` gives: ``(i, 1)``), gathers them and returns the sum
of their results (``children² + 2 · children``, which the benchmark checks).

Every worker process registers it: ``apps.EverystepBenchConfig.ready`` imports this
module (``everystep``'s autodiscovery imports only ``workflows.py``).
"""

from __future__ import annotations

import os
import threading
import time

from everystep import gather, start, workflow
from everystep_bench.workflows import bench_three


def note_pass(passes_file: str) -> None:
    """Append one line (time, worker pid, thread) to ``passes_file``. Bench only, and
    deliberately not a step: it runs on every pass of the body, replays included, so
    the benchmark counts the body's passes across worker processes by counting lines."""
    line = f"{time.time():.6f} {os.getpid()} {threading.current_thread().name}\n"
    with open(passes_file, "a", encoding="utf-8") as out:
        out.write(line)


@workflow
def bench_fanout(children: int, passes_file: str) -> int:
    note_pass(passes_file)
    runs = [start(bench_three, i, 1) for i in range(children)]
    return sum(gather(runs))
