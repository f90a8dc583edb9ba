"""The config's provider, base URL, key and model become the first connection, `default` (issue 26): nothing the
operator set is lost. The config keeps naming the model (a bare name resolves against its connection)."""

from django.db import migrations


def config_into_connection(apps, schema_editor):
    AgentConfig = apps.get_model("accounts", "AgentConfig")
    Connection = apps.get_model("accounts", "Connection")
    for config in AgentConfig.objects.filter(connection__isnull=True):
        name = "default"
        while Connection.objects.filter(name=name).exists():
            name = f"{name}-{config.pk}"
        connection = Connection.objects.create(
            name=name, provider=config.provider or "offline", base_url=config.base_url or "",
            api_key=config.api_key or "", models=[config.model] if config.model else [], enabled=True)
        config.connection = connection
        config.save(update_fields=["connection"])


def connection_into_config(apps, schema_editor):
    AgentConfig = apps.get_model("accounts", "AgentConfig")
    for config in AgentConfig.objects.exclude(connection__isnull=True).select_related("connection"):
        connection = config.connection
        config.provider, config.base_url, config.api_key = connection.provider, connection.base_url, connection.api_key
        config.save(update_fields=["provider", "base_url", "api_key"])


class Migration(migrations.Migration):

    dependencies = [
        ("accounts", "0003_connections"),
    ]

    operations = [
        migrations.RunPython(config_into_connection, connection_into_config),
    ]
