"""Webhook triggers: their records, their secrets, and the checks a `POST /hooks/<id>` passes before it runs."""

# A request is admitted (`admit`) in this order, each refusal an AppError in the envelope, recorded in the audit
# log as `webhook.refused` under the flood rule of `refusal_record`:
# 1. the trigger exists (404 `not_found`);
# 2. the body is at most MAX_BODY_BYTES (413 `payload_too_large`): 4 bytes a character, so no body of
#    MAX_INPUT_CHARS UTF-8 characters is refused here;
# 3. the credential: `Authorization: Bearer <secret>`, or `X-Agentsite-Timestamp: <unix seconds>` with
#    `X-Agentsite-Signature: sha256=<hex HMAC-SHA256(secret, timestamp + "." + raw body)>`; a wrong or missing
#    one is 401 `signature_invalid`, a timestamp more than WINDOW_S away 401 `signature_expired`, a signature
#    accepted before 409 `signature_replayed` (the seen-signature store is shared by every process: Redis when
#    REDIS_URL is set, else the database; an entry expires after the window);
# 4. the trigger is enabled (403 `trigger_disabled`);
# 5. the content type: `application/json` (a JSON document: the run's input is its text) or `text/plain` (the
#    text), UTF-8; anything else 415 `unsupported_media_type`; a text over the run API's input limit
#    (runs.MAX_INPUT_CHARS characters) 413 `payload_too_large` naming it;
# 6. the trigger's rate (`rate_per_minute`, a fixed minute window; shared through Redis when set, else per
#    process): 429 `rate_limited` with Retry-After.
#
# The view checks next that the API key the trigger's secret was handed to (`created_by_key`, if any) still
# stands (403 `trigger_disabled` naming why not: the trigger stops with its key), then the budget (usage
# `check` with a Caller for that key, else for the owner, facet "webhook").
# Nothing of a trigger is cached in a process: each request reads its row, so a disabled trigger or a rotated
# secret refuses at once in every process.

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from agentsite.core.audit import audit
from agentsite.core.errors import AppError
from agentsite.core.jsonbody import json_loads_bounded
from workflows.models import WebhookSignature, Workflow, WorkflowTrigger, WorkflowVersion
from workflows.runs import MAX_INPUT_CHARS

logger = logging.getLogger(__name__)

WINDOW_S = 300
# A UTF-8 character is at most 4 bytes: a longer body holds more than MAX_INPUT_CHARS characters, refused before
# it is read.
MAX_BODY_BYTES = 4 * MAX_INPUT_CHARS
SECRET_PREFIX = "whsec_"
FIELDS = ("enabled", "mode", "version", "rate_per_minute")
MAX_RATE = 1_000_000


def body_too_large() -> str:
    return (f"The body is over {MAX_BODY_BYTES} bytes: a run's input may be at most {MAX_INPUT_CHARS} characters "
            "(of at most 4 bytes each).")


def secret_of(trigger: WorkflowTrigger | Any) -> str:
    """The trigger's secret, derived from SECRET_KEY and its nonce (so rotating the nonce rotates it)."""
    mac = hmac.new(settings.SECRET_KEY.encode(), f"agentsite.webhook:{trigger.id}:{trigger.nonce}".encode(),
                   hashlib.sha256)
    return SECRET_PREFIX + mac.hexdigest()


# --- the records ---------------------------------------------------------------------------------------

def trigger_changes_check(workflow: Workflow, changes: dict[str, Any]) -> dict[str, Any]:
    """`changes` (of FIELDS) if they are valid for a trigger of `workflow`; raises AppError 400 naming the field.
    The API and the Django admin both check through here."""
    if changes.get("mode", WorkflowTrigger.SYNC) not in (WorkflowTrigger.SYNC, WorkflowTrigger.ASYNC):
        raise AppError("invalid", "mode must be sync or async.", 400, {"mode": ["sync or async."]})
    version = changes.get("version")
    if version is not None and not WorkflowVersion.objects.filter(workflow=workflow, number=version).exists():
        raise AppError("invalid", f"The workflow has no version {version}.", 400,
                       {"version": [f"1 to {workflow.version}."]})
    rate = changes.get("rate_per_minute")
    if rate is not None and not 1 <= rate <= MAX_RATE:
        raise AppError("invalid", f"rate_per_minute must be 1 to {MAX_RATE}.", 400,
                       {"rate_per_minute": [f"1 to {MAX_RATE}."]})
    return changes


def trigger_create(*, workflow: Workflow, changes: dict[str, Any], key: Any = None) -> WorkflowTrigger:
    """A trigger; `key`: the API key of the request (None: a dashboard token), to which its secret is handed,
    so its runs are that key's (its budget) and stop when the key no longer stands (`admit`)."""
    changes = trigger_changes_check(workflow, {name: value for name, value in changes.items() if name in FIELDS})
    if changes.get("rate_per_minute") is None:
        changes["rate_per_minute"] = int(getattr(settings, "AGENTSITE_WEBHOOK_RATE_PER_MIN", 60))
    return WorkflowTrigger.objects.create(workflow=workflow, nonce=secrets.token_hex(32),
                                          created_by_key_id=None if key is None else key.pk, **changes)


def trigger_update(*, trigger: WorkflowTrigger, changes: dict[str, Any]) -> WorkflowTrigger:
    changes = trigger_changes_check(trigger.workflow, {key: value for key, value in changes.items() if key in FIELDS})
    if "rate_per_minute" in changes and changes["rate_per_minute"] is None:
        raise AppError("invalid", "rate_per_minute must be a number.", 400, {"rate_per_minute": ["A number."]})
    for key, value in changes.items():
        setattr(trigger, key, value)
    trigger.save()
    return trigger


def trigger_rotate(*, trigger: WorkflowTrigger, key: Any = None) -> WorkflowTrigger:
    """A new secret, handed to the request's API key (None: a dashboard token): the runs become that key's."""
    trigger.nonce, trigger.rotated_at = secrets.token_hex(32), timezone.now()
    trigger.created_by_key_id = None if key is None else key.pk
    trigger.save(update_fields=["nonce", "rotated_at", "created_by_key"])
    return trigger


def trigger_list_for(*, workflow: Workflow) -> list[WorkflowTrigger]:
    return list(WorkflowTrigger.objects.filter(workflow=workflow).order_by("created_at"))


def trigger_get_for(*, workflow: Workflow, trigger_id: uuid.UUID) -> WorkflowTrigger:
    found = WorkflowTrigger.objects.filter(workflow=workflow, pk=trigger_id).select_related("workflow").first()
    if found is None:
        raise AppError("not_found", "No such trigger.", 404)
    return found


# --- admitting a request -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Admitted:
    trigger_id: uuid.UUID
    workflow_id: uuid.UUID
    owner_id: int
    mode: str
    version: int | None
    input_text: str
    key_id: int | None = None  # the API key the trigger's runs act as (None: its owner)


# A wrong, stale or replayed credential is a failed authentication (as a wrong password at log-in); every other
# refusal is the server refusing a request (as a rate-limited log-in).
CREDENTIAL_FAILURES = ("signature_invalid", "signature_expired", "signature_replayed")


def refusal_record(trigger_id: uuid.UUID, error: AppError, request: Any, *, known: bool | None = None) -> bool:
    """Record a refused `POST /hooks/<id>` in the audit log, unless one like it was recorded this minute: True
    when recorded. Sync (database work): the async view calls it through `db`.

    The event: action `webhook.refused`, door `anonymous`, target `trigger:<id>`, outcome `failure` for
    CREDENTIAL_FAILURES and `refused` for the rest, details `{status, code}`, the client address as the
    trusted-proxy rule sees it; never a secret, a signature or the body.

    The flood rule (docs/api.md, Webhook triggers): at most one event per trigger, code and minute (a fixed
    window, shared through Redis when set, else per process); refusals for triggers that do not exist share
    one bucket per code, so random ids cannot fill the table either. `known` says whether the trigger exists
    (None: looked up).
    """
    if known is None:
        known = error.code != "not_found" and WorkflowTrigger.objects.filter(pk=trigger_id).exists()
    if not _first_this_minute(f"{trigger_id if known else 'unknown'}:{error.code}"):
        logger.debug("webhook refusal not recorded again this minute: trigger=%s code=%s", trigger_id, error.code)
        return False
    audit("webhook.refused", outcome="failure" if error.code in CREDENTIAL_FAILURES else "refused",
          request=request, door="anonymous", target=f"trigger:{trigger_id}",
          details={"status": error.status, "code": error.code})
    return True


def admit(*, trigger_id: uuid.UUID, headers: Any, body: bytes, content_type: str, charset: str | None,
          now: float | None = None) -> Admitted:
    """Steps 1 to 6 of the module docstring, for a request's parts. Raises AppError."""
    row = _trigger_row(trigger_id)
    if row is None:
        raise AppError("not_found", "No such trigger.", 404)
    raw_pk, nonce, enabled, mode, version, rate, raw_workflow_id, key_id, owner_id = row
    pk = WorkflowTrigger._meta.pk.to_python(raw_pk)
    workflow_id = Workflow._meta.pk.to_python(raw_workflow_id)
    if len(body) > MAX_BODY_BYTES:
        raise AppError("payload_too_large", body_too_large(), 413, {"limit_chars": MAX_INPUT_CHARS})
    secret = secret_of(_Key(pk, nonce))
    _authenticate(pk, secret, headers, body, time.time() if now is None else now)
    if not enabled:
        raise AppError("trigger_disabled", "This trigger is disabled.", 403)
    text = _input(body, content_type, charset)
    _limit(pk, rate)
    return Admitted(pk, workflow_id, owner_id, mode, version, text, key_id)


def _trigger_row(trigger_id: uuid.UUID) -> tuple[Any, ...] | None:
    """The trigger's row with its workflow's owner, by a statement written once (as workflows.selectors'
    _stamp_row: an ORM query built and compiled for each request cost ~0.9 ms of CPU)."""
    quote, trigger, workflow = connection.ops.quote_name, WorkflowTrigger._meta, Workflow._meta
    columns = ", ".join(f"t.{quote(trigger.get_field(name).column)}" for name in (
        "id", "nonce", "enabled", "mode", "version", "rate_per_minute", "workflow", "created_by_key"))
    sql = (f"SELECT {columns}, w.{quote(workflow.get_field('owner').column)} FROM {quote(trigger.db_table)} t "
           f"JOIN {quote(workflow.db_table)} w ON w.{quote(workflow.pk.column)} = "
           f"t.{quote(trigger.get_field('workflow').column)} WHERE t.{quote(trigger.pk.column)} = %s")
    with connection.cursor() as cursor:
        cursor.execute(sql, [trigger.pk.get_db_prep_value(trigger.pk.to_python(trigger_id), connection)])
        return cursor.fetchone()


@dataclass(frozen=True)
class _Key:
    id: Any
    nonce: str


def _authenticate(pk: Any, secret: str, headers: Any, body: bytes, now: float) -> None:
    authorization = headers.get("Authorization") or ""
    signature = headers.get("X-Agentsite-Signature")
    if authorization:
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), secret.encode()):
            raise AppError("signature_invalid", "The Bearer secret is not this trigger's.", 401)
        return
    if not signature:
        raise AppError("signature_invalid", "Send the trigger's secret as Authorization: Bearer, or sign the body "
                       "(X-Agentsite-Timestamp, X-Agentsite-Signature).", 401)
    stamp = (headers.get("X-Agentsite-Timestamp") or "").strip()
    if not stamp.isdigit() or len(stamp) > 12:
        raise AppError("signature_invalid", "X-Agentsite-Timestamp must be the Unix time in seconds.", 401)
    expected = "sha256=" + hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(signature.strip().lower().encode(), expected.encode()):
        raise AppError("signature_invalid", "The signature does not match the body and timestamp.", 401)
    if abs(now - int(stamp)) > WINDOW_S:
        raise AppError("signature_expired", f"The timestamp is more than {WINDOW_S} seconds from the server's "
                       "clock.", 401)
    if not _first_sighting(hashlib.sha256(f"{pk}:{expected}".encode()).hexdigest()):
        raise AppError("signature_replayed", "This signature was already used.", 409)


def _input(body: bytes, content_type: str, charset: str | None) -> str:
    if content_type not in ("application/json", "text/plain"):
        raise AppError("unsupported_media_type", "Send the body as application/json or text/plain.", 415)
    if charset and charset.lower().replace("_", "-") not in ("utf-8", "utf8"):
        raise AppError("unsupported_media_type", "Send the body in UTF-8.", 415)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise AppError("invalid", "The body is not UTF-8 text.", 400) from None
    if len(text) > MAX_INPUT_CHARS:  # the run API's limit (runs.check_input), for the same stored input
        raise AppError("payload_too_large", f"The input is {len(text)} characters; a run's input may be at most "
                       f"{MAX_INPUT_CHARS}.", 413, {"limit_chars": MAX_INPUT_CHARS, "chars": len(text)})
    if content_type == "application/json":
        json_loads_bounded(body)  # raises AppError 400 `invalid` for anything not JSON
    return text


# --- shared stores: Redis when set, else the database (replays) or this process (rates) ------------------

_redis_client: Any = None
_redis_lock = threading.Lock()


def _redis() -> Any:
    global _redis_client
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        return None
    with _redis_lock:
        if _redis_client is None:
            import redis  # only with REDIS_URL: without it the client library is never loaded

            _redis_client = redis.Redis.from_url(url, socket_timeout=2)
        return _redis_client


def _prefix() -> str:
    return os.environ.get("AGENTSITE_CACHE_PREFIX", "agentsite")


_sweeps = 0


def _first_sighting(digest: str) -> bool:
    """True the first time `digest` is seen (within 2 windows: past that, its timestamp is refused anyway)."""
    global _sweeps
    client = _redis()
    if client is not None:
        return bool(client.set(f"{_prefix()}:hooksig:{digest}", b"1", nx=True, ex=2 * WINDOW_S))
    now = timezone.now()
    _sweeps += 1
    if _sweeps % 200 == 1:
        WebhookSignature.objects.filter(expires_at__lt=now).delete()
    try:
        with transaction.atomic():
            WebhookSignature.objects.create(digest=digest, expires_at=now + timedelta(seconds=2 * WINDOW_S))
    except IntegrityError:
        return WebhookSignature.objects.filter(digest=digest, expires_at__lt=now).delete()[0] > 0 and \
            _first_sighting(digest)
    return True


def _minute() -> int:
    return int(time.time() // 60)


_recorded: set[str] = set()
_recorded_minute = [0]
_recorded_lock = threading.Lock()


def _first_this_minute(bucket: str) -> bool:
    """True for the first sighting of `bucket` in this minute (the audit's flood rule). A store that fails lets
    the event through: the audit log errs on recording."""
    minute = _minute()
    client = _redis()
    if client is not None:
        try:
            return bool(client.set(f"{_prefix()}:hookaudit:{bucket}:{minute}", b"1", nx=True, ex=120))
        except Exception:  # a boundary: Redis unreachable
            logger.warning("The webhook audit's flood store (Redis) failed; recording the refusal", exc_info=True)
            return True
    with _recorded_lock:
        if _recorded_minute[0] != minute:
            _recorded.clear()
            _recorded_minute[0] = minute
        if bucket in _recorded:
            return False
        _recorded.add(bucket)
        return True


_counts: dict[tuple[str, int], int] = {}
_counts_lock = threading.Lock()


def _limit(pk: Any, rate: int) -> None:
    minute = int(time.time() // 60)
    retry = str(60 - int(time.time()) % 60)
    client = _redis()
    if client is not None:
        key = f"{_prefix()}:hookrate:{pk}:{minute}"
        pipe = client.pipeline()
        pipe.incr(key)
        pipe.expire(key, 120)
        count = pipe.execute()[0]
    else:
        with _counts_lock:
            if len(_counts) > 10_000:
                for stale in [key for key in _counts if key[1] < minute]:
                    del _counts[stale]
            count = _counts[(str(pk), minute)] = _counts.get((str(pk), minute), 0) + 1
    if count > rate:
        raise AppError("rate_limited", f"This trigger takes {rate} requests a minute.", 429,
                       headers={"Retry-After": retry})
