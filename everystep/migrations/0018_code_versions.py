"""Code versions (issue 52): which code scheduled a run, recorded each step, and handed a
run back, and which names each live worker carries, so that in a deploy with two versions
of the code a worker claims only runs it can carry on; and what ``Task.using()`` set for a
task's run (issue 54). Nullable columns only: added without rewriting a table on any
database."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("everystep", "0017_runner_space_heartbeat"),
    ]

    operations = [
        migrations.AddField(
            model_name="runner",
            name="carries",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="runner",
            name="code_version",
            field=models.CharField(blank=True, max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="step",
            name="code_version",
            field=models.CharField(blank=True, max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="workflow",
            name="code_version",
            field=models.CharField(blank=True, max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="workflow",
            name="handed_back_by",
            field=models.CharField(blank=True, max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="workflow",
            name="task_options",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
