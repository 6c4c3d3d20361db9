"""The indexes of the foreign keys 0009 and 0010 add to the runs table (``parent``,
``forked_from``), built online (issue 22): concurrently on PostgreSQL; on MariaDB the
foreign key constraint made them already. A project that applied 0009 and 0010 before
they left their index to this migration has both: nothing is built again."""

from django.db import migrations

from everystep.migrations._online import BuildIndex


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction; every operation is idempotent.
    atomic = False

    dependencies = [
        ("everystep", "0010_recovery"),
    ]

    operations = [
        BuildIndex("workflow", field="parent"),
        BuildIndex("workflow", field="forked_from"),
    ]
