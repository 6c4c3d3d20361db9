"""The index pruning walks (issue 51): runs by completion time, so a prune batch reads the
runs it deletes and no others, and the call that finds nothing left reads nothing, where
a walk of the primary key read every run completed since the cutoff (2.9 million rows
at 3 million runs). Runs not finished have no completion time. Built online, as 0006
to 0011: concurrently on PostgreSQL, in place on MariaDB."""

from django.db import migrations, models

from everystep.migrations._online import AddIndexOnline


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction; every operation is idempotent.
    atomic = False

    dependencies = [
        ("everystep", "0015_audit_confirmation"),
    ]

    operations = [
        AddIndexOnline(
            model_name="workflow",
            index=models.Index(fields=["completed_at", "id"], name="everystep_wf_completed"),
        ),
    ]
