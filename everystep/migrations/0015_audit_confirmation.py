"""The UI confirmation a bulk action was taken under, unique (issue 50): two requests of
one confirmation at once make one audit entry. A nullable column on the audit table
only (not the runs table): every existing entry keeps NULL, which the unique key allows
any number of times, and the previous release, which knows nothing of it, goes on
writing entries with NULL while the fleet is rolled."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("everystep", "0014_published"),
    ]

    operations = [
        migrations.AddField(
            model_name="auditentry",
            name="confirmation",
            field=models.CharField(blank=True, max_length=255, null=True, unique=True),
        ),
    ]
