"""Composition (issue 19): a child run names its ``parent``; a run someone waits for is
``awaited``; a waiting body's awaited runs are ``RunWait`` rows. Both new columns are
nullable or have a constant default, which PostgreSQL and MariaDB add without rewriting
the table; the index of ``parent`` is built online by 0011 (issue 22)."""

import django.db.models.deletion
from django.db import migrations, models

from everystep.migrations._online import AddFieldIndexLater, AddFieldKeepDefault


class Migration(migrations.Migration):
    dependencies = [
        ("everystep", "0008_ui_runners"),
    ]

    operations = [
        AddFieldKeepDefault(
            model_name="workflow",
            name="awaited",
            field=models.BooleanField(default=False),
            database_default="false",
        ),
        AddFieldIndexLater(
            model_name="workflow",
            name="parent",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="children",
                to="everystep.workflow",
            ),
        ),
        migrations.CreateModel(
            name="RunWait",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "awaited_run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="awaited_by",
                        to="everystep.workflow",
                    ),
                ),
                (
                    "waiter",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="awaits",
                        to="everystep.workflow",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("waiter", "awaited_run"), name="everystep_unique_run_wait"
                    )
                ],
            },
        ),
    ]
