"""The organisation app: on start, it registers the groups' model policy with the runtime
(organisation.modelaccess), and drops a user's cached memberships in every process whenever a membership or a
group changes (saved or deleted through the API, the admin or a shell)."""

from django.apps import AppConfig
from django.db import transaction

from agentsite.agent.modelaccess import set_model_policy
from agentsite.core import invalidation, usercaches


class OrganisationConfig(AppConfig):
    name = "organisation"
    verbose_name = "Organisation"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Here, not at the module top: models load only once the app registry is ready (the meta view
        # imports DRF, whose settings import the authentication classes and their models).
        from django.db.models.signals import post_delete, post_save

        from agentsite.core.meta import register_section
        from organisation import selectors
        from organisation.modelaccess import GroupModelPolicy
        from organisation.models import Group, Membership

        set_model_policy(GroupModelPolicy())
        usercaches.with_user(selectors.memberships)  # asked by every LLM call right after its user
        invalidation.subscribe(selectors.TOPIC, selectors.drop)
        register_section("access", describe_access)
        for name, signal in (("save", post_save), ("delete", post_delete)):
            signal.connect(_membership_changed, sender=Membership, dispatch_uid=f"org-membership-{name}")
            signal.connect(_group_changed, sender=Group, dispatch_uid=f"org-group-{name}")


def _membership_changed(sender, instance, **kwargs) -> None:
    _changed(instance.user_id)


def _group_changed(sender, instance, **kwargs) -> None:
    _changed(None)


def _changed(key: object) -> None:
    """Dropped here at once, and announced everywhere once committed."""
    # The selectors module imports the models, which the app registry loads after this module.
    from organisation import selectors

    invalidation.drop_here(selectors.TOPIC, key)
    transaction.on_commit(lambda: invalidation.announce(selectors.TOPIC, key))


def describe_access() -> dict:
    """GET /api/meta `access`: the visibilities, the member roles, and each shareable kind with the grant roles
    it takes (the Share dialog offers those)."""
    # The models and the policy registry load after this module (the app registry).
    from organisation.models import MEMBER_ROLES, VISIBILITIES
    from organisation.policy import RESOURCES

    kinds = {name: {"label": kind.label, "roles": list(kind.roles)} for name, kind in sorted(RESOURCES.items())}
    return {"visibilities": list(VISIBILITIES), "member_roles": list(MEMBER_ROLES), "kinds": kinds}
