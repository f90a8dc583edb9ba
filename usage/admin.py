from django.contrib import admin

from usage.models import ModelPrice, UsageDaily, UserBudget


@admin.register(UsageDaily)
class UsageDailyAdmin(admin.ModelAdmin):
    list_display = ("day", "user_id", "key_id", "facet", "model_requested", "model_answered", "requests",
                    "prompt_tokens", "completion_tokens", "cost")
    list_filter = ("facet",)


admin.site.register(ModelPrice)
admin.site.register(UserBudget)
