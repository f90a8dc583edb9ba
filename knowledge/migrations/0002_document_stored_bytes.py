"""Each document's stored size, which the knowledge-base quota (AGENTSITE_KB_QUOTA_MB) adds up."""

from django.db import migrations, models

VECTOR_BYTES = 1024  # 256 float32 values


def stored_bytes_fill(apps, schema_editor):
    Document = apps.get_model("knowledge", "Document")
    Chunk = apps.get_model("knowledge", "Chunk")
    for document in Document.objects.only("id", "content").iterator(chunk_size=100):
        chunks = Chunk.objects.filter(document_id=document.pk).values_list("text", flat=True).iterator()
        stored = len(document.content.encode("utf-8")) + sum(len(text.encode("utf-8")) + VECTOR_BYTES
                                                             for text in chunks)
        Document.objects.filter(pk=document.pk).update(stored_bytes=stored)


class Migration(migrations.Migration):

    dependencies = [
        ("knowledge", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="document",
            name="stored_bytes",
            field=models.PositiveBigIntegerField(
                default=0, help_text="What the document holds in the database, as the knowledge-base quota counts "
                                     "it: the text's UTF-8 bytes, plus each chunk's UTF-8 bytes and its 1,024-byte "
                                     "vector."),
        ),
        migrations.RunPython(stored_bytes_fill, migrations.RunPython.noop),
    ]
