"""A project-like package: settings for worker subprocesses that need other settings than
``tests.settings``, and a ``wsgi`` module as ``startproject`` writes one."""
