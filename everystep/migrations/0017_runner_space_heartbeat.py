"""Where a runner's pid means something, and its heartbeat interval (issue 52): a worker
restarted on the same host after a crash sees that its predecessor's process is gone and
takes the name at once, and one watching a live holder waits two of the holder's beats.
Two nullable columns: added without rewriting the table on every database."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("everystep", "0016_prune_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="runner",
            name="process_space",
            field=models.CharField(blank=True, max_length=100, null=True),
        ),
        migrations.AddField(
            model_name="runner",
            name="heartbeat",
            field=models.FloatField(blank=True, null=True),
        ),
    ]
