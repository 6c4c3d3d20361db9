# The UI's search box finds a run by its idempotency key whatever the workflow name: the
# unique (name, idempotency_key) constraint cannot serve a lookup on the key alone.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("everystep", "0005_durable_time"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="workflow",
            index=models.Index(fields=["idempotency_key"], name="everystep_wf_key"),
        ),
    ]
