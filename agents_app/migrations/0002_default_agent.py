"""The agent `default` made from the stored config: its system prompt, model, temperature, max tokens and tools
become the agent's version 1 (a fresh database: the config's first-run values). The config keeps its columns, so a
process of the previous release still reads them during a rolling restart; they mirror the agent from here on."""

from django.db import migrations

FIELDS = {"system_prompt": "instructions", "model": "model", "temperature": "temperature",
          "max_tokens": "max_tokens", "tools": "tools"}
FIRST_RUN = {"instructions": "You are a helpful assistant.", "model": "", "temperature": 0.7, "max_tokens": 1024,
             "tools": ["*"]}
VERSIONED = ("name", "description", "instructions", "model", "tools", "knowledge", "temperature", "max_tokens",
             "starters")


def make_default(apps, schema_editor):
    Agent = apps.get_model("agents_app", "Agent")
    AgentVersion = apps.get_model("agents_app", "AgentVersion")
    AgentConfig = apps.get_model("catalogue", "AgentConfig")
    if Agent.objects.filter(slug="default").exists():
        return
    config = AgentConfig.objects.filter(pk=1).first()
    fields = dict(FIRST_RUN) if config is None else {field: getattr(config, name) for name, field in FIELDS.items()}
    agent = Agent.objects.create(slug="default", name="Default", description="The deployment's agent.",
                                 visibility="everyone", owner=None, version=1, knowledge=[], starters=[], **fields)
    AgentVersion.objects.create(agent=agent, number=1, note="create from the config",
                                data={name: getattr(agent, name) for name in VERSIONED})


class Migration(migrations.Migration):
    dependencies = [
        ("agents_app", "0001_initial"),
        ("catalogue", "0002_content_types_moved"),
    ]

    operations = [migrations.RunPython(make_default, migrations.RunPython.noop)]
