"""Django admin for the authorization server's rows: registered clients, consents under way, codes and tokens,
read-only (they are made by the protocol only). No secret is shown: neither a hash of one (`*_hash`) nor a
token's password version. Operators end grants with the token list's "Revoke" action (oauth.services, the path
every revocation takes: the tokens stop at once in every process), and may delete a client that registered
unwanted (its tokens end with it, as each deleted row announces its drop); deletions are audited too."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from agentsite.core.audit import audit
from oauth.models import AccessToken, AuthorizationCode, Client, ConsentRequest
from oauth.services import grants_revoke


class _ReadOnly(admin.ModelAdmin):
    """Shown, never added or edited here (only the protocol makes these rows). A superuser may delete them: a
    deleted user or client takes its rows with it (Django admin refuses the deletion of a row whose dependants
    one may not delete), and a deleted token ends at once in every process, as a revoked one does."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)


@admin.register(Client)
class ClientAdmin(_ReadOnly):
    """The clients that registered (RFC 7591). A deleted client takes its consents, codes and tokens with it."""

    list_display = ["name", "client_id", "auth_method", "registered_from", "created_at"]
    search_fields = ["name", "client_id", "registered_from"]
    fields = ["name", "client_id", "auth_method", "redirect_uris", "grant_types", "response_types", "scope",
              "metadata", "registered_from", "created_at"]

    def delete_model(self, request: HttpRequest, obj: Client) -> None:
        _client_deleted(request, obj)
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Client]) -> None:
        for client in queryset:
            _client_deleted(request, client)
        super().delete_queryset(request, queryset)


def _client_deleted(request: HttpRequest, client: Client) -> None:
    audit("oauth.revoke", request=request, door="admin", target=f"oauth_client:{client.client_id}",
          details={"client_deleted": True, "client_name": client.name})


@admin.register(ConsentRequest)
class ConsentRequestAdmin(_ReadOnly):
    """Authorization requests waiting for a user's decision (they live 10 minutes)."""

    list_display = ["client", "created_at", "expires_at"]
    fields = ["client", "created_at", "expires_at"]


@admin.register(AuthorizationCode)
class AuthorizationCodeAdmin(_ReadOnly):
    """Codes issued after a consent (each lives a minute and is used once)."""

    list_display = ["client", "user", "created_at", "expires_at", "used_at"]
    list_filter = ["used_at"]
    fields = ["client", "user", "redirect_uri", "scope", "resource", "code_challenge_method", "family", "created_at",
              "expires_at", "used_at"]


@admin.register(AccessToken)
class AccessTokenAdmin(_ReadOnly):
    """Each row is an access token and its refresh token; a grant's rows share a family. "Revoke" ends the
    grants of the rows selected."""

    list_display = ["client", "user", "resource", "state", "issued_at", "expires_at", "refresh_expires_at",
                    "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]  # not by client: registration is open, the list could be long
    search_fields = ["user__username", "client__name", "client__client_id"]
    fields = ["client", "user", "state", "family", "scope", "resource", "issued_at", "expires_at",
              "refresh_expires_at", "rotated_at", "revoked_at", "last_used_at"]
    readonly_fields = ["state"]
    actions = ["revoke"]

    def delete_model(self, request: HttpRequest, obj: AccessToken) -> None:
        _token_deleted(request, obj)
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AccessToken]) -> None:
        for token in queryset.select_related("client"):
            _token_deleted(request, token)
        super().delete_queryset(request, queryset)

    @admin.display(description="state")
    def state(self, token: AccessToken) -> str:
        if token.revoked_at is not None:
            return "revoked"
        if token.rotated_at is not None:
            return "refreshed"
        if token.refresh_expires_at is not None and token.refresh_expires_at <= timezone.now():
            return "expired"
        return "live" if not token.is_expired() else "live (refresh only)"

    @admin.action(description="Revoke the selected grants (every process, at once)")
    def revoke(self, request: HttpRequest, queryset: QuerySet[AccessToken]) -> None:
        count = grants_revoke(tokens=queryset, request=request)
        self.message_user(request, f"{count} token(s) revoked.", messages.SUCCESS)


def _token_deleted(request: HttpRequest, token: AccessToken) -> None:
    audit("oauth.revoke", request=request, door="admin", target=f"oauth_client:{token.client.client_id}",
          details={"user_id": token.user_id, "row_deleted": True})
