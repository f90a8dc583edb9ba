"""vulture's whitelist (tests/foundation/test_unreferenced.py): the names a framework calls by convention or a
setting names as a string, which no Python code references. Parsed by vulture, never imported or run."""
# ruff: noqa: B018, F821

# Django admin: permission hooks, and the columns list_display names as strings.
_.has_add_permission
_.has_change_permission
_.has_delete_permission
_.environment  # mcpbridge/admin.py
_.header_names  # mcpbridge/admin.py
_.get_readonly_fields  # agents_app/admin.py
# Django: a management command's arguments, a middleware's exception hook, a URL converter's reverse.
_.add_arguments
_.process_exception
_.to_url
# Django REST framework: a paginator's and a schema extension's hooks; settings.REST_FRAMEWORK's handler.
_.get_limit
_.get_offset
_.get_name
_.get_security_definition
drf_exception_handler  # agentsite/settings.py: REST_FRAMEWORK["EXCEPTION_HANDLER"]
# importlib's loader protocol (plugins/loader.py), watchdog's event handler (plugins/watcher.py).
_.get_code
_.on_any_event
# Anthropic's stream events, dispatched by name: getattr(self, f"_on_{event.type}") (providers/anthropic.py).
_._on_error
_._on_message_start
_._on_content_block_start
_._on_content_block_delta
_._on_content_block_stop
_._on_message_delta
_._on_message_stop
# django-q2 entry points, queued by dotted name: one a release queued, still run for tasks queued then.
task_run_execute  # scheduler/tasks.py
# Django REST framework by field name: a SerializerMethodField's get_<field>, a serializer's validate_<field>.
_.get_api_key_set  # catalogue/connections_api.py
_.get_base_url
_.get_discovery_error
_.get_steps  # sessions_app/api.py
_.get_serializer_class  # sessions_app/api.py (DRF's GenericAPIView asks it)
_.get_header_names
_.get_is_default
_.get_status  # accounts/keys_api.py
_.get_url  # uploads/api.py
_.validate_models  # catalogue/connections_api.py
_.validate_headers
_.validate_text  # voice/speech/api.py
# DRF's content negotiation (uploads/api.py) and simplejwt's user lookup (accounts/authentication/jwt_auth.py).
_.select_renderer
_.get_user
# Django forms by field name (clean_<field>), and admin columns list_display names as strings.
_.clean_base_url  # catalogue/admin.py
_.clean_api_key
_.clean_headers
_.shown_base_url
_.uploads  # uploads/admin.py
_.used_bytes
_.approver_names  # workflows/admin.py
_.hook_path
# A queued task named by its dotted path (workflows/approvals.py TIMEOUT_TASK).
approval_timeout_task
# Authlib calls these by name (oauth/models.py, oauth/server.py, oauth/views.py): the client, code and token
# contracts (authlib.oauth2.rfc6749 ClientMixin, AuthorizationCodeMixin, TokenMixin), the server's, the grants'
# and the endpoints' storage hooks.
_.get_client_id
_.get_allowed_scope
_.check_redirect_uri
_.check_client_secret
_.check_endpoint_auth_method
_.check_response_type
_.check_grant_type
_.get_redirect_uri
_.check_client
_.get_expires_in
_.is_revoked
_.query_client
_.generate_token
_.save_token
_.save_authorization_code
_.generate_authorization_code
_.query_authorization_code
_.delete_authorization_code
_.authenticate_user
_.authenticate_refresh_token
_.revoke_old_credential
_._validate_token_scope
_.query_token
_.revoke_token
_.authenticate_token
_.get_server_metadata
_.generate_client_secret
_.save_client
_.async_auth_flow  # mcpbridge/oauthgrant.py: httpx2 calls an Auth's flow by name
_.destroy  # a2a_app/server/store.py: a2a-sdk's request handler calls the event stream's by name
