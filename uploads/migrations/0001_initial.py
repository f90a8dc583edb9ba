"""The models Upload and UploadQuota move here from the voice app. Only Django's state moves: the tables keep
their names (voice_upload, voice_uploadquota, through Meta.db_table), so no row is copied and no table is locked
or renamed, and a process of the previous release still running during the upgrade reads the same tables.
The content types follow, so that permissions granted on uploads and the admin's history stay attached."""

import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MODELS = ("upload", "uploadquota")


def _content_types_move(apps, from_label: str, to_label: str) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    taken = set(content_type.objects.filter(app_label=to_label, model__in=MODELS).values_list("model", flat=True))
    content_type.objects.filter(app_label=from_label, model__in=set(MODELS) - taken).update(app_label=to_label)


def content_types_to_uploads(apps, schema_editor) -> None:
    _content_types_move(apps, "voice", "uploads")


def content_types_to_voice(apps, schema_editor) -> None:
    _content_types_move(apps, "uploads", "voice")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("voice", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.CreateModel(
                name='UploadQuota',
                fields=[
                    ('owner', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='upload_quota', serialize=False, to=settings.AUTH_USER_MODEL)),
                ],
                options={
                    'db_table': 'voice_uploadquota',
                },
            ),
            migrations.CreateModel(
                name='Upload',
                fields=[
                    ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                    ('filename', models.CharField(help_text="The client's name for it, cleaned; never a path.", max_length=255)),
                    ('content_type', models.CharField(help_text='Sniffed from the bytes.', max_length=100)),
                    ('size', models.PositiveBigIntegerField(help_text='Bytes.')),
                    ('sha256', models.CharField(max_length=64)),
                    ('is_image', models.BooleanField(default=False, help_text='A PNG, JPEG, GIF or WebP image Pillow has verified.')),
                    ('stored_as', models.CharField(help_text="The file's name in the media storage (generated).", max_length=100, unique=True)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                    ('owner', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='uploads', to=settings.AUTH_USER_MODEL)),
                ],
                options={
                    'db_table': 'voice_upload',
                    'ordering': ['-created_at', 'id'],
                    'indexes': [models.Index(fields=['owner', '-created_at'], name='upload_owner_created')],
                },
            ),
        ]),
        migrations.RunPython(content_types_to_uploads, content_types_to_voice),
    ]
