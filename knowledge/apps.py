from django.apps import AppConfig


class KnowledgeConfig(AppConfig):
    name = "knowledge"
    verbose_name = "Knowledge base"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agentsite.agent.context import register_context_source
        from knowledge.context import knowledge_context

        register_context_source("knowledge", knowledge_context)
