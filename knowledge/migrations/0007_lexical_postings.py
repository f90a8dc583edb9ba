"""PostgreSQL: the lexical index's postings, a row per (owner, lexeme, chunk) with the lexeme's count in the chunk
and the chunk's length, kept by triggers on the index, so BM25 reads a query word's chunks from one index range
instead of reading and decoding each chunk's tsvector (knowledge/lexical.py). Upgrading fills it from the
existing index. Nothing on SQLite."""

from django.db import migrations


def postings_create(apps, schema_editor):
    from knowledge import lexical

    lexical.postings_schema_create(schema_editor.connection)


def postings_drop(apps, schema_editor):
    from knowledge import lexical

    lexical.postings_schema_drop(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0006_lexical_terms"),
    ]

    operations = [
        migrations.RunPython(postings_create, postings_drop),
    ]
