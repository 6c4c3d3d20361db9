#!/usr/bin/env python
"""A small project whose own tests publish progress, run by Django's test runner and by
pytest-django (tests/integration/test_test_runners.py)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "publishing_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
