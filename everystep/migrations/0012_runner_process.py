"""One live process per runner name (issues 33 and 40): each heartbeat row records the
host and pid of the process beating under the name, so a worker refused the name can say
which process holds it. Both columns are nullable: a worker of the previous release,
which knows neither, keeps inserting its row while the fleet is rolled. The runners table
holds one row per live worker, so the brief exclusive lock of the column adds (and, on
PostgreSQL, the check of ``pid >= 0`` against its rows) costs nothing."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("everystep", "0011_online_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="runner",
            name="host",
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddField(
            model_name="runner",
            name="pid",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]
