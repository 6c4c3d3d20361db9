"""Django's task framework on everystep (issue 35): a run of a ``@task`` keeps its queue,
its attempts and whether its next claim resumes after a durable wait. The three columns
are nullable, which PostgreSQL and MariaDB add without rewriting the runs table; a worker
of the previous release, which knows none of them, keeps writing runs while the fleet is
rolled."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("everystep", "0012_runner_process"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflow",
            name="queue",
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddField(
            model_name="workflow",
            name="attempts",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="workflow",
            name="resumes",
            field=models.BooleanField(blank=True, null=True),
        ),
    ]
