"""The content types of the moved models change app (`accounts` -> `catalogue`) in place, keeping their ids: the
permissions that point at them (and the users and groups given those permissions) and the admin's history
entries stay valid, and Django makes no second set of content types and permissions beside the old ones."""

from django.db import migrations

MODELS = ("agentconfig", "connection", "modelalias")


def _move(apps, schema_editor, source: str, target: str) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    for model in MODELS:
        if content_type.objects.using(db).filter(app_label=target, model=model).exists():
            continue  # already there (made by a later post_migrate): the old one is left to remove_stale_contenttypes
        content_type.objects.using(db).filter(app_label=source, model=model).update(app_label=target)


def forwards(apps, schema_editor) -> None:
    _move(apps, schema_editor, "accounts", "catalogue")


def backwards(apps, schema_editor) -> None:
    _move(apps, schema_editor, "catalogue", "accounts")


class Migration(migrations.Migration):

    dependencies = [
        ("catalogue", "0001_initial"),
        ("accounts", "0012_catalogue_moved"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
