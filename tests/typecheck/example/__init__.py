"""Workflows, steps and the calls a project makes to start and wait for them, with the
types a checker must find written down (``assert_type``)."""
