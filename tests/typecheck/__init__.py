"""A project that uses everystep's public API, type-checked by pyright (strict) and
``mypy --strict`` (``tests/unit/test_typing.py``): ``example/`` passes both, and each
line of ``bad/`` marked ``# expect-error`` is reported by both, and nothing else is.
Never imported: the checkers read it."""
