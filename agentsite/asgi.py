"""ASGI entry point: Django (and later the MCP apps) behind the limits wrapper."""

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

# On the embedded default (SQLite) nothing uses psycopg, but DRF's compat module imports
# django.contrib.postgres whenever psycopg is installed: ~9 MiB of every server process. A server process on
# SQLite is refused that import (DRF falls back as if psycopg were absent); on PostgreSQL nothing changes.
if os.environ.get("DATABASE_URL", "").partition(":")[0] not in ("postgres", "postgresql", "pgsql"):
    sys.modules.setdefault("psycopg", None)  # type: ignore[arg-type]

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

from agentsite.server.requestthreads import ReusedRequestThreads  # noqa: E402

# Static files (admin, the offline API docs) come from the app finders, so `serve` needs no
# collectstatic step; a production deployment may put a CDN or nginx in front instead. Each request's
# sync work runs on a reused thread that keeps its database connection (agentsite/server/requestthreads.py).
django_app = ReusedRequestThreads(ASGIStaticFilesHandler(get_asgi_application()))

from agentsite.server.asgi_limits import LimitsMiddleware, install_daphne_body_limit  # noqa: E402
from agentsite.server.routing import build_application  # noqa: E402

application = LimitsMiddleware(build_application(django_app))
install_daphne_body_limit()  # under daphne: refuse an over-size body while it arrives, not after

from django.conf import settings  # noqa: E402

from agentsite.server.accesslog import install_access_log_masking, install_json_access_log  # noqa: E402

if settings.AGENTSITE_LOG_FORMAT == "json":
    install_json_access_log()  # daphne's access log as JSON lines with the request id
install_access_log_masking()  # last: it wraps whichever writer is installed (an OAuth callback's code is masked)

from agentsite.server import heap  # noqa: E402

if heap.is_server_process():
    heap.settle()  # last: the heap the server starts with is frozen (agentsite/server/heap.py)
