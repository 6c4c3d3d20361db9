# The shop's permission (shop/models.py): a model without a table.

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Catalogue",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
            ],
            options={
                "permissions": [
                    ("import_catalogue", "Can import the catalogue and follow its progress")
                ],
                "managed": False,
                "default_permissions": (),
            },
        ),
    ]
