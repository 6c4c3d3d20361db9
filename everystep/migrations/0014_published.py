"""Progress a run publishes (issue 38): one row per run and key, deleted with its run
(by Django's cascade: no constraint in the database, whose check would lock the run's
row). A new table only: a worker of the previous release never reads or writes it."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("everystep", "0013_tasks"),
    ]

    operations = [
        migrations.CreateModel(
            name="Published",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=200)),
                ("value", models.JSONField(blank=True, null=True)),
                ("version", models.BigIntegerField(default=1)),
                ("updated_at", models.DateTimeField()),
                (
                    "workflow",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="published",
                        to="everystep.workflow",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("workflow", "key"), name="everystep_unique_published"
                    )
                ],
            },
        ),
    ]
