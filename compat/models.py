"""What /v1 keeps: the Responses API's stored responses (POST /v1/responses with `store`, the default)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class StoredResponse(models.Model):
    """One stored response of POST /v1/responses. `history` is the whole conversation it ends (the previous
    response's history, this request's input items, then its output items, in Responses item shapes), so that
    `previous_response_id` needs one read; `response` is the response object as it was returned. `owner` is the
    caller's user (None: an anonymous caller that compat_auth let in; only anonymous callers see those)."""

    id = models.CharField(primary_key=True, max_length=64)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                              related_name="stored_responses")
    previous = models.CharField(max_length=64, blank=True, default="")
    instructions = models.TextField(blank=True, default="")
    history = models.JSONField(default=list)
    response = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["owner", "created_at"])]

    def __str__(self) -> str:
        return self.id
