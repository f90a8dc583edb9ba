"""The agents app: registers the agent as a shareable kind (organisation.policy), its directory with the runtime
(agentsite.agent.agents: `agent:<slug>` on every door), and keeps the directory's copy current in every process:
a save or delete of an agent (the API, the admin, a shell) and a change of an agent's access rule drop it
everywhere. The config's agent fields are the agent `default`'s: a config save becomes a version of it."""

from django.apps import AppConfig
from django.db import transaction

from agentsite.core import invalidation


class AgentsConfig(AppConfig):
    name = "agents_app"
    verbose_name = "Agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported once the app registry is ready: these modules import the models.
        from django.db.models.signals import post_delete, post_save

        from agents_app import selectors, services
        from agents_app.models import Agent, AgentGrant
        from agentsite.agent.agents import register_directory
        from catalogue.models import AgentConfig
        from organisation.access import TOPIC as ACCESS_TOPIC
        from organisation.policy import ResourceKind, register

        register(ResourceKind(kind="agent", model=Agent, label="agent", name_field="slug",
                              transfer=services.agent_transfer, check_rule=services.rule_check))
        register_directory(selectors.directory)
        invalidation.subscribe(services.TOPIC, selectors.directory.drop)
        invalidation.subscribe(ACCESS_TOPIC, _access_changed)
        for name, signal in (("save", post_save), ("delete", post_delete)):
            signal.connect(_agent_changed, sender=Agent, dispatch_uid=f"agents-agent-{name}")
            signal.connect(_agent_changed, sender=AgentGrant, dispatch_uid=f"agents-grant-{name}")
        post_save.connect(_config_saved, sender=AgentConfig, dispatch_uid="agents-config-save")


def _agent_changed(sender, instance, **kwargs) -> None:
    """Dropped here at once, and announced everywhere once committed."""
    from agents_app import services  # it imports the models: this module is read before the app registry is ready

    invalidation.drop_here(services.TOPIC)
    transaction.on_commit(lambda: invalidation.announce(services.TOPIC))


def _access_changed(key: str | None) -> None:
    """organisation.access announces a changed rule or owner as `<kind>:<id>`."""
    from agents_app import selectors  # as above: it imports the models

    if key is None or key.startswith("agent:"):
        selectors.directory.drop()


def _config_saved(sender, instance, raw=False, **kwargs) -> None:
    from agents_app import services  # as above: it imports the models

    if not raw:  # a fixture load writes rows as they are
        services.config_saved(instance)
