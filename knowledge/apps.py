from django.apps import AppConfig


class KnowledgeConfig(AppConfig):
    name = "knowledge"
    verbose_name = "Knowledge base"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Django's app registry: these import the models, which are ready only in ready().
        from agentsite.agent.context import register_context_source
        from knowledge import dense
        from knowledge.context import knowledge_context, knowledge_context_now
        from knowledge.lexical import LexicalRanker
        from knowledge.models import Collection
        from knowledge.ranking import register_ranker
        from knowledge.selectors import VectorRanker, has_personal
        from knowledge.services import collection_transfer
        from organisation.policy import ResourceKind, register

        register(ResourceKind(kind="collection", model=Collection, label="knowledge collection",
                              transfer=collection_transfer))
        register_context_source("knowledge", knowledge_context, now=knowledge_context_now)
        # Whether each user has a personal collection is kept per process (knowledge.selectors.has_personal).
        has_personal.follows(Collection, key=lambda collection: collection.owner_id,
                             when=lambda collection: collection.personal)
        # The signals `hybrid` fuses, in this order (another app may register more: knowledge.ranking).
        register_ranker(VectorRanker())
        register_ranker(LexicalRanker())
        if dense.model_files() is not None:  # the `dense` extra is installed (knowledge/dense_index.py)
            from knowledge.dense_index import DenseRanker  # the app registry, as above

            register_ranker(DenseRanker())
