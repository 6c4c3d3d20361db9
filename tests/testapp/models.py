"""A log of step body executions, written by the test workflows from whichever process
runs them: it shows which process executed what, and when."""

from django.db import models


class Execution(models.Model):
    run_id = models.UUIDField()
    step = models.CharField(max_length=64)
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)
