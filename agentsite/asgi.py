"""ASGI entry point: Django (and later the MCP apps) behind the limits wrapper."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

from agentsite.requestthreads import ReusedRequestThreads  # noqa: E402

# Static files (admin, the offline API docs) come from the app finders, so `serve` needs no
# collectstatic step; a production deployment may put a CDN or nginx in front instead. Each request's
# sync work runs on a reused thread that keeps its database connection (agentsite/requestthreads.py).
django_app = ReusedRequestThreads(ASGIStaticFilesHandler(get_asgi_application()))

from agentsite.asgi_limits import LimitsMiddleware, install_daphne_body_limit  # noqa: E402
from agentsite.routing import build_application  # noqa: E402

application = LimitsMiddleware(build_application(django_app))
install_daphne_body_limit()  # under daphne: refuse an over-size body while it arrives, not after
