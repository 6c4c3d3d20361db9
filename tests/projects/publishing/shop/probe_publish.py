"""Tests as a user writes them, for Django's test runner (``manage.py test --pattern
'probe_*.py'``): in a ``TestCase`` (each test in a transaction) and in a
``TransactionTestCase``, runs that publish are driven by ``run_due()``."""

from django.test import TestCase, TransactionTestCase

import everystep
from everystep.testing import run_due
from shop.workflows import aship, ship


class Checks:
    def test_a_sync_workflow_publishes(self):
        run = everystep.schedule(ship, ["tea", "cups"])
        run_due()
        self.assertEqual(everystep.result(run, timeout=0), ["packed tea", "packed cups"])
        self.assertEqual(everystep.published(run), {"stage": "done", "packing": "cups"})

    def test_an_async_workflow_publishes(self):
        run = everystep.schedule(aship, ["tea", "cups"])
        run_due()
        self.assertEqual(everystep.result(run, timeout=0), 7)
        self.assertEqual(everystep.published(run), {"stage": "done", "weighing": "cups"})


class InATransaction(Checks, TestCase):
    pass


class Committed(Checks, TransactionTestCase):
    pass
