"""The search index of session names and message text (sessions_app.search): an FTS5 table kept by triggers on
SQLite, GIN expression indexes on PostgreSQL; filled from the rows there are."""

from django.db import migrations

from sessions_app import search


def search_index_create(apps, schema_editor):
    index = search.INDEXES.get(schema_editor.connection.vendor)
    if index is not None:
        index.schema_create(schema_editor.connection)


def search_index_drop(apps, schema_editor):
    index = search.INDEXES.get(schema_editor.connection.vendor)
    if index is not None:
        index.schema_drop(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [("sessions_app", "0006_single_paths")]

    operations = [migrations.RunPython(search_index_create, search_index_drop)]
