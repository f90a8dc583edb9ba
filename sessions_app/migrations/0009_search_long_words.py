"""PostgreSQL's search terms leave out a word too long for a tsvector once prefixed with its owner's id (such a word
made the index refuse the whole message, and the message's write fail): the terms function replaced."""

from django.db import migrations

from sessions_app import search


def terms_function_replace(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(search.PostgresIndex.terms_function(replace=True))


class Migration(migrations.Migration):

    dependencies = [("sessions_app", "0008_message_stopped")]

    operations = [migrations.RunPython(terms_function_replace, migrations.RunPython.noop)]
