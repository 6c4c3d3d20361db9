"""The benchmark app: installs the statement counter in a worker process when
``EVERYSTEP_BENCH_COUNT_FILE`` names a file (see ``counting.serve_snapshots``)."""

from __future__ import annotations

import os

from django.apps import AppConfig


class EverystepBenchConfig(AppConfig):
    name = "everystep_bench"
    verbose_name = "everystep benchmarks"

    def ready(self) -> None:
        path = os.environ.get("EVERYSTEP_BENCH_COUNT_FILE")
        if path:
            from everystep_bench import counting

            counting.install()
            counting.serve_snapshots(path)
        import everystep

        # A tree from before composition (``compare.py --source``) has no start/gather.
        if hasattr(everystep, "gather"):
            from everystep_bench import fanout_workflows  # noqa: F401  (registers bench_fanout)
        # A tree from before async bodies (issue 36) has no aresult.
        if hasattr(everystep, "aresult"):
            from everystep_bench import async_workflows  # noqa: F401  (async_io.py's)
