#!/usr/bin/env python
"""manage.py of bench/peers/django_tasks.py's project (the workers run through it)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
