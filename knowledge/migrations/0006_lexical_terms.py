"""PostgreSQL: each owner's chunk count per lexeme (document frequency), kept by triggers on the lexical index,
so a query finds its common words (more than lexical.COMMON_CHUNKS chunks: left out, as on SQLite) and its
BM25 idf by primary key instead of scoring every chunk that holds a word (knowledge/lexical.py). Nothing on
SQLite."""

from django.db import migrations


def terms_create(apps, schema_editor):
    from knowledge import lexical

    lexical.terms_schema_create(schema_editor.connection)


def terms_drop(apps, schema_editor):
    from knowledge import lexical

    lexical.terms_schema_drop(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0005_lexical_stats"),
    ]

    operations = [
        migrations.RunPython(terms_create, terms_drop),
    ]
