"""Recovery (issue 20): a forked run names the run and the step it was forked from; a
step settled by an operator names who settled it; operators' write actions are audited.
The new columns are nullable, which PostgreSQL and MariaDB add without rewriting the
tables; the audit table is new. The index of ``forked_from`` is built online by 0011
(issue 22)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

from everystep.migrations._online import AddFieldIndexLater


class Migration(migrations.Migration):
    dependencies = [
        ("everystep", "0009_composition"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="workflow",
            options={
                "permissions": [
                    ("cancel_workflow", "Can cancel runs"),
                    ("requeue_workflow", "Can requeue running runs"),
                    ("resolve_workflow", "Can settle the uncertain step of blocked runs"),
                    ("send_event", "Can send events to waiting runs"),
                    ("fork_workflow", "Can fork runs (re-run them from a step)"),
                ]
            },
        ),
        migrations.AddField(
            model_name="step",
            name="settled_by",
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        AddFieldIndexLater(
            model_name="workflow",
            name="forked_from",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="forks",
                to="everystep.workflow",
            ),
        ),
        migrations.AddField(
            model_name="workflow",
            name="forked_from_step",
            field=models.CharField(blank=True, max_length=300, null=True),
        ),
        migrations.CreateModel(
            name="AuditEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("at", models.DateTimeField(default=django.utils.timezone.now)),
                ("action", models.CharField(max_length=32)),
                ("actor", models.CharField(max_length=255)),
                ("via", models.CharField(max_length=64)),
                ("run_ids", models.JSONField(blank=True, default=list)),
                ("filter", models.JSONField(blank=True, null=True)),
                ("count", models.PositiveIntegerField(default=0)),
                ("reason", models.TextField(blank=True, default="")),
                ("detail", models.JSONField(blank=True, default=dict)),
                (
                    "run",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="audit",
                        to="everystep.workflow",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "audit entries",
                "indexes": [models.Index(fields=["at"], name="everystep_audit_at")],
            },
        ),
    ]
