"""Every existing session becomes one path: each message's parent is the message before it, and `current` the
last; stored sources take the shape the tree's messages carry ({collection, document: {id, filename}, ...})."""

from django.db import migrations

BATCH = 500


def _source(old):
    if "document" in old:  # already the new shape
        return old
    collection = old.get("collection_id")
    return {"collection": {"id": collection, "name": ""} if collection else None,
            "document": {"id": old.get("document_id"), "filename": old.get("filename", "")},
            "chunk_index": old.get("chunk_index"), "score": old.get("score"), "rank_score": old.get("rank_score"),
            "text": old.get("text", "")}


def single_paths(apps, schema_editor):
    ChatSession = apps.get_model("sessions_app", "ChatSession")
    ChatMessage = apps.get_model("sessions_app", "ChatMessage")
    # A list, not iterator(): SQLite would read the table in batches while the loop writes it.
    for session_id in list(ChatSession.objects.values_list("pk", flat=True)):
        previous = None
        changed = []
        for message in ChatMessage.objects.filter(session_id=session_id).order_by("seq").only(
                "pk", "parent", "sources"):
            message.parent_id = previous
            message.sources = [_source(source) for source in message.sources or [] if isinstance(source, dict)]
            changed.append(message)
            previous = message.pk
        if changed:
            ChatMessage.objects.bulk_update(changed, ["parent", "sources"], batch_size=BATCH)
            ChatSession.objects.filter(pk=session_id).update(current_id=previous)


class Migration(migrations.Migration):

    dependencies = [("sessions_app", "0005_tree")]

    operations = [migrations.RunPython(single_paths, migrations.RunPython.noop)]
