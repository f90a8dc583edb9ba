from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('mcpbridge', '0005_access_rules'),
    ]

    operations = [
        migrations.RemoveField(
            model_name='mcpserver',
            name='users',
        ),
        migrations.AlterField(
            model_name='mcpserver',
            name='visibility',
            field=models.CharField(default='private', max_length=10),
        ),
    ]
