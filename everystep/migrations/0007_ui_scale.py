"""The runs page at a million runs (issue 13, bench/ui_scale.py): the status counts of
one workflow, and of one workflow on one runner, read an index each instead of walking
the workflow's history. The runner index gains ``name``; it is built before the old one
is dropped, so catchup and orphan recovery never go without one. Built and dropped online (issue 22):
concurrently on PostgreSQL, in place on MariaDB."""

from django.db import migrations, models

from everystep.migrations._online import AddIndexOnline, RemoveIndexOnline


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction; every operation is idempotent.
    atomic = False

    dependencies = [
        ("everystep", "0006_ui_search"),
    ]

    operations = [
        AddIndexOnline(
            model_name="workflow",
            index=models.Index(fields=["name", "status", "id"], name="everystep_wf_name_status_id"),
        ),
        AddIndexOnline(
            model_name="workflow",
            index=models.Index(
                fields=["claimed_by", "status", "name"], name="everystep_wf_claimed_name"
            ),
        ),
        RemoveIndexOnline(model_name="workflow", name="everystep_wf_claimed"),
    ]
