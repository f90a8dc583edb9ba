"""Collections: every document moves into a collection. Each user who has documents gets a personal collection
named "Personal" whose key is their user id, so the lexical index (keyed by that number) stays as it was; the
per-owner stamps become per-collection ones (recreated empty: every process's matrix is rebuilt at its next
search, as after any write)."""

import uuid

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import organisation.models  # noqa: F401 - the grant's base model lives there

PERSONAL_NAME = "Personal"


def personal_collections(apps, schema_editor):
    Collection = apps.get_model("knowledge", "Collection")
    Document = apps.get_model("knowledge", "Document")
    db = schema_editor.connection.alias
    owners = Document.objects.using(db).values_list("owner_id", flat=True).distinct().order_by("owner_id")
    for owner_id in owners:
        collection = Collection.objects.using(db).create(owner_id=owner_id, name=PERSONAL_NAME, personal=True,
                                                         key=owner_id)
        Document.objects.using(db).filter(owner_id=owner_id).update(collection=collection)


def back_to_owners(apps, schema_editor):
    # Going back: documents keep their uploader as owner; only a collection's documents survive it, as one.
    pass


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0007_lexical_postings"),
        ("organisation", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Collection",
            fields=[
                ("visibility", models.CharField(default="private", max_length=10)),
                ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=100, validators=[django.core.validators.MinLengthValidator(1)])),
                ("description", models.TextField(blank=True, default="")),
                ("personal", models.BooleanField(default=False, help_text="The owner's personal collection, made on first use: where documents go when no collection is named.")),
                ("key", models.PositiveIntegerField(editable=False, help_text="The collection's number in the search indexes (never changes).", unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("owner", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="kb_collections", to=settings.AUTH_USER_MODEL)),
            ],
            options={
                "ordering": ["name", "id"],
                "constraints": [
                    models.UniqueConstraint(fields=("owner", "name"), name="kb_collection_owner_name"),
                    models.UniqueConstraint(condition=models.Q(("personal", True)), fields=("owner",), name="kb_collection_one_personal"),
                ],
            },
        ),
        migrations.CreateModel(
            name="CollectionGrant",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("role", models.CharField(default="viewer", max_length=10)),
                ("group", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name="%(app_label)s_%(class)s_set", to="organisation.group")),
                ("resource", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="grants", to="knowledge.collection")),
                ("user", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name="%(app_label)s_%(class)s_set", to=settings.AUTH_USER_MODEL)),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(condition=models.Q(models.Q(("group__isnull", True), ("user__isnull", False)), models.Q(("group__isnull", False), ("user__isnull", True)), _connector="OR"), name="kb_collection_grant_one_grantee"),
                    models.UniqueConstraint(fields=("resource", "user"), name="kb_collection_grant_user"),
                    models.UniqueConstraint(fields=("resource", "group"), name="kb_collection_grant_group"),
                ],
            },
        ),
        migrations.AddField(
            model_name="document",
            name="collection",
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.CASCADE, related_name="documents", to="knowledge.collection"),
        ),
        migrations.RunPython(personal_collections, back_to_owners),
        migrations.AlterField(
            model_name="document",
            name="collection",
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="documents", to="knowledge.collection"),
        ),
        migrations.AlterField(
            model_name="document",
            name="owner",
            field=models.ForeignKey(blank=True, help_text="Who added it; null once that user is gone (the quota counts the collection's owner).", null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="kb_documents", to=settings.AUTH_USER_MODEL),
        ),
        migrations.RemoveIndex(model_name="document", name="kb_document_owner_created"),
        migrations.AddIndex(
            model_name="document",
            index=models.Index(fields=["collection", "-created_at"], name="kb_document_collection_created"),
        ),
        migrations.DeleteModel(name="KnowledgeStamp"),
        migrations.CreateModel(
            name="KnowledgeStamp",
            fields=[
                ("key", models.PositiveIntegerField(primary_key=True, serialize=False)),
                ("value", models.BigIntegerField(default=0)),
                ("changed_at", models.DateTimeField(auto_now=True)),
            ],
        ),
    ]
