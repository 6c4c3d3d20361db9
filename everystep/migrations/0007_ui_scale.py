"""The runs page at a million runs (issue 13): the status counts of one workflow read
an index of (name, status, id) instead of the workflow's whole history."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("everystep", "0005_durable_time"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="workflow",
            index=models.Index(fields=["name", "status", "id"], name="everystep_wf_name_status_id"),
        ),
    ]
