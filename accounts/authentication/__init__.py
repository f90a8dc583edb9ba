"""Who a request is: dashboard tokens (JWT), API keys, and the per-process caches that make checking them cost no
query. One module per concern; every name stays importable from here, as settings' REST_FRAMEWORK and the doors
import it: `user_cache` (the users credentials name), `api_keys` (keys, their cache and scopes), `key_last_used`,
`jwt_auth` (DRF's JWTAuthentication, token checks), `bearer` (the header at the doors outside DRF), `streams`
(a long response ends when its credential is revoked) and `views` (the async POST views under /api).
"""

from accounts.authentication.api_keys import (
    KEY_PREFIX,
    KeyCache,
    KeyCredential,
    aauthenticate_key,
    authenticate_key,
    failure_detail,
    is_api_key,
    key_digest,
    keys,
    scope_problem,
)
from accounts.authentication.bearer import (
    acaller_from_bearer_header,
    auser_for_bearer,
    auser_from_bearer_header,
    bearer_scheme,
    bearer_token,
    user_for_bearer,
    user_from_bearer_header,
)
from accounts.authentication.jwt_auth import (
    VALIDATED_MAX,
    JWTAuthentication,
    aauthenticate_token,
    auser_for_token,
    is_token_shaped,
    user_for_token,
)
from accounts.authentication.key_last_used import LastUsed, last_used
from accounts.authentication.streams import credential_of, credential_problem, revocable
from accounts.authentication.user_cache import UserCache, users
from accounts.authentication.views import async_post_view

__all__ = [
    "KEY_PREFIX", "VALIDATED_MAX", "JWTAuthentication", "KeyCache", "KeyCredential", "LastUsed", "UserCache",
    "aauthenticate_key", "aauthenticate_token", "acaller_from_bearer_header", "async_post_view", "authenticate_key",
    "auser_for_bearer", "auser_for_token", "auser_from_bearer_header", "bearer_scheme", "bearer_token",
    "credential_of", "credential_problem", "failure_detail", "is_api_key", "is_token_shaped", "key_digest", "keys",
    "last_used", "revocable", "scope_problem", "user_for_bearer", "user_for_token", "user_from_bearer_header",
    "users",
]
