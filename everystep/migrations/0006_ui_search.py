# The UI's search box finds a run by its idempotency key whatever the workflow name: the
# unique (name, idempotency_key) constraint cannot serve a lookup on the key alone.
# Indexes are built online (issue 22): concurrently on PostgreSQL, in place on MariaDB;
# this migration also builds 0005's due index.

from django.db import migrations, models

from everystep.migrations._online import AddIndexOnline, BuildIndex


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction; every operation is idempotent.
    atomic = False

    dependencies = [
        ("everystep", "0005_durable_time"),
    ]

    operations = [
        BuildIndex("workflow", index_name="everystep_wf_due"),
        AddIndexOnline(
            model_name="workflow",
            index=models.Index(fields=["idempotency_key"], name="everystep_wf_key"),
        ),
    ]
