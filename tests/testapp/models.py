"""A log of step body executions, written by the test workflows from whichever process
runs them: it shows which process executed what, and when."""

from django.db import models


class Execution(models.Model):
    run_id = models.UUIDField()
    step = models.CharField(max_length=64)
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)


class ChaosEffect(models.Model):
    """One execution of a chaos step body (``tests.testapp.chaos``), written by the body
    itself: rows per (run, step) minus recorded steps = re-executions. ``token`` is
    unique per execution so a body that retries its insert across a database restart
    never writes two rows for one execution."""

    run_id = models.UUIDField()
    step_id = models.CharField(max_length=300)
    pid = models.IntegerField()
    token = models.UUIDField(unique=True)
    began_at = models.DateTimeField()
