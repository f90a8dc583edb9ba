"""Upload and UploadQuota now belong to the uploads app (uploads/migrations/0001_initial.py): they leave the voice
app's state only; their tables stay as they are, the uploads app's now."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("voice", "0001_initial"),
        ("uploads", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.DeleteModel(name="Upload"),
            migrations.DeleteModel(name="UploadQuota"),
        ]),
    ]
