"""The runners page at a million runs (issue 13, bench/ui_scale.py): the running runs per
holder are counted from the status index alone, which gains ``claimed_by``. The new index
is built before the old one is dropped, so the status filters never go without one. Built and dropped online (issue 22):
concurrently on PostgreSQL, in place on MariaDB."""

from django.db import migrations, models

from everystep.migrations._online import AddIndexOnline, RemoveIndexOnline


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction; every operation is idempotent.
    atomic = False

    dependencies = [
        ("everystep", "0007_ui_scale"),
    ]

    operations = [
        AddIndexOnline(
            model_name="workflow",
            index=models.Index(
                fields=["status", "id", "claimed_by"], name="everystep_wf_status_holder"
            ),
        ),
        RemoveIndexOnline(model_name="workflow", name="everystep_wf_status_id"),
    ]
