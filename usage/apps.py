from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "usage"
    verbose_name = "Usage, prices and budgets"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Django's app registry: the metering and budgets import the models, ready only in ready().
        from agentsite.agent.usage import set_metering
        from agentsite.core import invalidation, usercaches
        from organisation.selectors import TOPIC as MEMBERSHIP_TOPIC
        from usage import budgets
        from usage.metering import PRICE_TOPIC, UsageMetering, prices, warm_budgets

        invalidation.subscribe(budgets.BUDGET_TOPIC, budgets.drop_user_budget)
        # After organisation's own subscription (an earlier app): its memberships are dropped first.
        invalidation.subscribe(MEMBERSHIP_TOPIC, budgets.drop_member_scopes)
        invalidation.subscribe(budgets.GROUP_BUDGET_TOPIC, budgets.drop_group_budgets)
        invalidation.subscribe(PRICE_TOPIC, prices.drop)
        set_metering(UsageMetering())
        usercaches.with_user(warm_budgets)  # asked by every metered call right after its user
