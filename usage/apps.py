from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "usage"
    verbose_name = "Usage, prices and budgets"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Django's app registry: the metering and budgets import the models, ready only in ready().
        from agentsite.agent.usage import set_metering
        from agentsite.core import invalidation
        from usage import budgets
        from usage.metering import PRICE_TOPIC, UsageMetering, prices

        invalidation.subscribe(budgets.BUDGET_TOPIC, budgets.drop_user_budget)
        invalidation.subscribe(PRICE_TOPIC, prices.drop)
        set_metering(UsageMetering())
