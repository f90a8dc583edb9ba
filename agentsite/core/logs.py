"""The request id and structured logs.

Every request gets an id: the client's `X-Request-Id` when it is well-formed (1-128 of `A-Za-z0-9._:-`), else a
new one (32 hex digits). It is in a context variable while the request is handled (async code and the threads
of sync_to_async see it), goes back as `X-Request-Id` on every response, into error envelopes (`request_id`), and
into every log line written meanwhile (`RequestIdFilter`). AGENTSITE_LOG_FORMAT=json makes each log line one
JSON object (`JsonFormatter`): time, level, logger, message, request_id, and the exception text if any.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import uuid
from datetime import UTC, datetime

REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentsite_request_id", default=None)
_WELL_FORMED = re.compile(r"[A-Za-z0-9._:-]{1,128}")
HEADER = "X-Request-Id"


def request_id_for(offered: str | None) -> str:
    """The client's id when well-formed, else a new one."""
    if offered and _WELL_FORMED.fullmatch(offered):
        return offered
    return uuid.uuid4().hex


class RequestIdFilter(logging.Filter):
    """Puts `request_id` (or None) on every record, so that formats and formatters may name it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get()
        return True


_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "request_id"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line. Extra fields given with `extra=` are kept (the audit logger's event)."""

    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or REQUEST_ID.get(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, ensure_ascii=False)


def logging_config(fmt: str, level: str = "INFO") -> dict:
    """The LOGGING setting for AGENTSITE_LOG_FORMAT (`text` or `json`): every logger writes through one handler
    on stderr that carries the request id (daphne's access log: agentsite.server.accesslog)."""
    formatter = {"()": "agentsite.core.logs.JsonFormatter"} if fmt == "json" else {
        "format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": "agentsite.core.logs.RequestIdFilter"}},
        "formatters": {"plain": formatter},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stderr",
                                "filters": ["request_id"]}},
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {"django.request": {"level": "ERROR"}, "httpx": {"level": "WARNING"}},
    }
