"""The lexical (full-text) index of the chunks (knowledge.lexical), filled for the chunks that exist already.

Each document's stored_bytes grows by its chunks' lexical entries, as knowledge.services.stored_size counts
them for new documents.
"""

from django.db import migrations, models

from knowledge import lexical


def lexical_index_create(apps, schema_editor):
    connection = schema_editor.connection
    if not lexical.supported(connection):
        return
    lexical.schema_create(connection)
    Document = apps.get_model("knowledge", "Document")
    Chunk = apps.get_model("knowledge", "Chunk")
    for document in Document.objects.only("id", "owner_id", "stored_bytes").iterator(chunk_size=100):
        rows = list(Chunk.objects.filter(document_id=document.pk).order_by("index").values_list("id", "text"))
        if not rows:
            continue
        words = [lexical.terms(row[1]) for row in rows]
        lexical.index_add(owner_id=document.owner_id, chunk_ids=[row[0] for row in rows], words=words,
                          connection=connection)
        added = sum(map(lexical.stored_bytes, words))
        Document.objects.filter(pk=document.pk).update(stored_bytes=document.stored_bytes + added)


def lexical_index_drop(apps, schema_editor):
    connection = schema_editor.connection
    if not lexical.supported(connection):
        return
    lexical.schema_drop(connection)
    Document = apps.get_model("knowledge", "Document")
    Chunk = apps.get_model("knowledge", "Chunk")
    for document in Document.objects.only("id", "stored_bytes").iterator(chunk_size=100):
        texts = Chunk.objects.filter(document_id=document.pk).values_list("text", flat=True)
        removed = sum(lexical.stored_bytes(lexical.terms(text)) for text in texts)
        Document.objects.filter(pk=document.pk).update(stored_bytes=max(document.stored_bytes - removed, 0))


class Migration(migrations.Migration):

    dependencies = [
        ("knowledge", "0002_document_stored_bytes"),
    ]

    operations = [
        migrations.AlterField(
            model_name="document",
            name="stored_bytes",
            field=models.PositiveBigIntegerField(
                default=0, help_text="What the document holds in the database, as the knowledge-base quota counts "
                                     "it: the text's UTF-8 bytes, plus each chunk's UTF-8 bytes, its 1,024-byte "
                                     "vector and its full-text index terms (counted twice)."),
        ),
        migrations.RunPython(lexical_index_create, lexical_index_drop),
    ]
