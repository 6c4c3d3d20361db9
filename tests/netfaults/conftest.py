"""The acceptance tier's real worker subprocesses (``workers``), for the network-fault
tests."""

from tests.acceptance.conftest import workers  # noqa: F401  (a fixture)
