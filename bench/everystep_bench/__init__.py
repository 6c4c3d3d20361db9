"""A Django app the benchmarks add to ``tests/settings.py``: tiny workflows
(``workflows.py``), a settings overlay (``settings.py``) and an opt-in statement counter
(``counting.py``). Nothing here is used by the test suite."""
