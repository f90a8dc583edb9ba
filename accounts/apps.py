"""The accounts app: on start, it connects the audit log's store, and drops a user's or a key's cached entry in every
process (accounts.authentication) whenever the row changes."""

from django.apps import AppConfig
from django.db import transaction

from agentsite.core import invalidation
from agentsite.core.audit import audit


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Here, not at the module top: models load only once the app registry is ready.
        from django.contrib.auth import get_user_model
        from django.contrib.auth.signals import user_logged_in, user_login_failed
        from django.db.models.signals import post_delete, post_save, pre_save

        from accounts.audit import audit_store, audit_trim_schedule_ensure
        from accounts.authentication import keys, users
        from accounts.models import ApiKey
        from accounts.ratelimit import client_ip
        from agentsite.core import audit as audit_log
        from agentsite.core.startup import on_service_start

        audit_log.set_store(audit_store, client_ip)
        on_service_start("audit retention schedule", audit_trim_schedule_ensure)
        user_logged_in.connect(_admin_logged_in, dispatch_uid="accounts-audit-admin-login")
        user_login_failed.connect(_admin_login_failed, dispatch_uid="accounts-audit-admin-login-failed")
        pre_save.connect(_activation_seen, sender=get_user_model(), dispatch_uid="accounts-audit-activation")
        invalidation.subscribe(users.TOPIC, users.drop)
        invalidation.subscribe(keys.TOPIC, keys.drop)
        user_model = get_user_model()
        for name, signal in (("save", post_save), ("delete", post_delete)):
            signal.connect(_user_changed, sender=user_model, dispatch_uid=f"accounts-user-{name}")
            signal.connect(_key_changed, sender=ApiKey, dispatch_uid=f"accounts-apikey-{name}")


def _is_admin_site(request) -> bool:
    return request is not None and getattr(request, "path", "").startswith("/admin/")


def _admin_logged_in(sender, request, user, **kwargs) -> None:
    if _is_admin_site(request):
        audit("admin.login", request=request, actor=user, door="session")


def _admin_login_failed(sender, credentials, request=None, **kwargs) -> None:
    if _is_admin_site(request):  # the API's own login records its failures itself
        audit("admin.login", outcome="failure", request=request, actor_name=str(credentials.get("username", "")),
              door="session")


def _activation_seen(sender, instance, update_fields=None, **kwargs) -> None:
    """A user's is_active changing (Django admin, a shell, any door) is audited, with whoever did it unknown
    here: the request's actor is read from the request id's log lines; the row names the target."""
    if instance.pk is None or (update_fields is not None and "is_active" not in update_fields):
        return
    before = sender.objects.filter(pk=instance.pk).values_list("is_active", flat=True).first()
    if before is not None and before != instance.is_active:
        audit("user.activation", door="system", target=f"user:{instance.pk}",
              details={"is_active": instance.is_active, "username": instance.username})


def _user_changed(sender, instance, **kwargs) -> None:
    _changed("user", instance.pk)


def _key_changed(sender, instance, **kwargs) -> None:
    _changed("apikey", instance.hash)


def _changed(topic: str, key) -> None:
    """Dropped here at once (even inside a transaction that may yet roll back: a drop only costs a reload),
    and announced everywhere once committed."""
    invalidation.drop_here(topic, key)
    transaction.on_commit(lambda: invalidation.announce(topic, key))
