"""The runs page at a million runs (issue 13, bench/ui_scale.py): the status counts of
one workflow, and of one workflow on one runner, read an index each instead of walking
the workflow's history. The runner index gains ``name``; it is built before the old one
is dropped, so catchup and orphan recovery never go without one."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("everystep", "0006_ui_search"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="workflow",
            index=models.Index(fields=["name", "status", "id"], name="everystep_wf_name_status_id"),
        ),
        migrations.AddIndex(
            model_name="workflow",
            index=models.Index(
                fields=["claimed_by", "status", "name"], name="everystep_wf_claimed_name"
            ),
        ),
        migrations.RemoveIndex(model_name="workflow", name="everystep_wf_claimed"),
    ]
