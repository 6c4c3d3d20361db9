"""The runners page at a million runs (issue 13, bench/ui_scale.py): the running runs per
holder are counted from the status index alone, which gains ``claimed_by``. The new index
is built before the old one is dropped, so the status filters never go without one."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("everystep", "0007_ui_scale"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="workflow",
            index=models.Index(
                fields=["status", "id", "claimed_by"], name="everystep_wf_status_holder"
            ),
        ),
        migrations.RemoveIndex(model_name="workflow", name="everystep_wf_status_id"),
    ]
