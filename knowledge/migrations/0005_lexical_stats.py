"""PostgreSQL: each owner's lexical-index statistics (row count, total length) in one row, kept by the writes,
so a BM25 query reads them instead of counting the owner's rows (knowledge/lexical.py). Nothing on SQLite."""

from django.db import migrations


def stats_create(apps, schema_editor):
    from knowledge import lexical

    lexical.stats_schema_create(schema_editor.connection)


def stats_drop(apps, schema_editor):
    from knowledge import lexical

    lexical.stats_schema_drop(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0004_chunk_dense"),
    ]

    operations = [
        migrations.RunPython(stats_create, stats_drop),
    ]
