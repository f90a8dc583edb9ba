"""The catalogue's models, moved from `accounts` with their tables: state only, the database is not touched (the
tables keep their `accounts_` names through Meta.db_table)."""

import catalogue.models
import django.core.validators
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('accounts', '0011_connection_passthrough'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.CreateModel(
                name='Connection',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(max_length=64, unique=True, validators=[django.core.validators.RegexValidator('^[a-z0-9_-]+$')])),
                    ('provider', models.CharField(default='openai', max_length=20, validators=[catalogue.models.provider_known])),
                    ('base_url', models.CharField(blank=True, default='', max_length=500)),
                    ('api_key', models.CharField(blank=True, default='', max_length=500)),
                    ('headers', models.JSONField(blank=True, default=dict)),
                    ('timeout_s', models.FloatField(default=120.0, validators=[django.core.validators.MinValueValidator(0.1), django.core.validators.MaxValueValidator(3600.0)])),
                    ('enabled', models.BooleanField(default=True)),
                    ('passthrough', models.BooleanField(default=False)),
                    ('discovered', models.JSONField(blank=True, default=list)),
                    ('discovery_error', models.TextField(blank=True, default='')),
                    ('discovered_at', models.DateTimeField(blank=True, null=True)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                    ('updated_at', models.DateTimeField(auto_now=True)),
                    ('models', models.JSONField(blank=True, default=list)),
                ],
                options={
                    'db_table': 'accounts_connection',
                    'ordering': ['id'],
                },
            ),
            migrations.CreateModel(
                name='ModelAlias',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(max_length=100, unique=True, validators=[django.core.validators.RegexValidator('^[a-z0-9][a-z0-9_.:-]*$')])),
                    ('strategy', models.CharField(default='fallback', max_length=20, validators=[catalogue.models.strategy_known])),
                    ('targets', models.JSONField(default=list)),
                    ('fallback_on', models.JSONField(blank=True, default=list)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                    ('updated_at', models.DateTimeField(auto_now=True)),
                ],
                options={
                    'verbose_name': 'model alias',
                    'verbose_name_plural': 'model aliases',
                    'db_table': 'accounts_modelalias',
                    'ordering': ['name'],
                },
            ),
            migrations.CreateModel(
                name='AgentConfig',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('model', models.CharField(blank=True, default='', max_length=300)),
                    ('system_prompt', models.TextField(blank=True, default='You are a helpful assistant.')),
                    ('temperature', models.FloatField(default=0.7, validators=[django.core.validators.MinValueValidator(0.0), django.core.validators.MaxValueValidator(2.0)])),
                    ('max_tokens', models.PositiveIntegerField(default=1024, validators=[django.core.validators.MinValueValidator(1)])),
                    ('tools', models.JSONField(blank=True, default=catalogue.models._all_tools)),
                    ('kb_enabled', models.BooleanField(default=True)),
                    ('kb_top_k', models.PositiveIntegerField(default=5, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(50)])),
                    ('kb_max_chars', models.PositiveIntegerField(default=4000, validators=[django.core.validators.MinValueValidator(1)])),
                    ('stt_provider', models.CharField(choices=[('hosted', 'Hosted'), ('local', 'Local'), ('browser', 'Browser')], default='local', max_length=20)),
                    ('tts_provider', models.CharField(choices=[('hosted', 'Hosted'), ('edge', 'Edge'), ('local', 'Local'), ('browser', 'Browser')], default='local', max_length=20)),
                    ('tts_voice', models.CharField(blank=True, default='en-us-female', max_length=100)),
                    ('allow_registration', models.BooleanField(default=True)),
                    ('compat_auth', models.CharField(choices=[('local', 'Local'), ('key', 'Key'), ('public', 'Public'), ('token', 'Token (same as key)')], default='local', max_length=10)),
                    ('updated_at', models.DateTimeField(auto_now=True)),
                    ('connection', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='catalogue.connection')),
                ],
                options={
                    'verbose_name': 'agent configuration',
                    'verbose_name_plural': 'agent configuration',
                    'db_table': 'accounts_agentconfig',
                },
            ),
        ]),
    ]
