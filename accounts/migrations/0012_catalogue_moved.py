"""AgentConfig, Connection and ModelAlias moved to the `catalogue` app (catalogue/migrations/0001_initial.py):
state only, their tables and rows stay."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0011_connection_passthrough'),
        ('catalogue', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.RemoveField(
                model_name='agentconfig',
                name='connection',
            ),
            migrations.DeleteModel(
                name='ModelAlias',
            ),
            migrations.DeleteModel(
                name='AgentConfig',
            ),
            migrations.DeleteModel(
                name='Connection',
            ),
        ]),
    ]
