"""What the benchmark scripts share, one module per job; the scripts import the module
that does the work (there is no facade here, as there is none in ``everystep.store``):

- ``options``: the command-line options every script spells the same way;
- ``session``: which source tree is measured, a fresh database (``session`` creates and
  drops it), the main of a benchmark script (``run_benchmark``);
- ``results``: the JSON line a script appends to ``bench/results/<kind>.jsonl``, and the
  header and footer of its printed report;
- ``server``: measuring a phase again when the shared database server restarted;
- ``runs``: scheduling, counting and clearing runs;
- ``cpu``: CPU and memory readings from ``/proc``, waiting for a quiet machine;
- ``workers``: worker subprocesses;
- ``phases``: the everystep phase and the raw-limit phase that ``compare.py``,
  ``history.py`` and ``scaling.py`` measure;
- ``raw_limit``: the raw-SQL limit, everystep's rows written with the bare driver;
- ``profiler``: py-spy attached to a worker, and its report.

No module here imports a benchmark script, and none imports Django or ``everystep`` at
import time: ``session.configure`` must run first (it picks the tree to import).
"""
