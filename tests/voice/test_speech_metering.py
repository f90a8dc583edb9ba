"""Hosted speech spends the operator's upstream key, so it is metered (facet `voice`) and held to the caller's
budgets before the service is called (issue 41, item 10): text to speech counts its text at 4 characters a
token, speech to text 10 tokens a second of audio, both as prompt tokens of the hosted model. The hosted
service is the fake OpenAI-compatible audio server on loopback; the budget counters are the real store.
"""

from __future__ import annotations

import pytest

from catalogue.selectors import config_cache_clear
from catalogue.services import config_update
from tests.fakes.audio import tone
from tests.fakes.http import FakeResponse
from usage import budgets, buffer
from usage.metering import prices
from usage.models import ModelPrice, UsageDaily, UserBudget

pytestmark = pytest.mark.django_db

TEXT = "Hello there"  # 11 characters: 3 tokens


@pytest.fixture
def hosted(fake_audio):
    config_update(changes={"provider": "openai", "base_url": fake_audio.base_url, "api_key": "sk-test-voice"})
    config_cache_clear()  # the update's on_commit never fires inside a test's transaction
    budgets.drop_user_budget(None)
    buffer.flush()
    UsageDaily.objects.all().delete()
    yield fake_audio
    buffer.flush()


def _budget(user, **limits) -> None:
    UserBudget.objects.update_or_create(user=user, defaults={"budget": limits})
    budgets.drop_user_budget(None)


def _rows() -> list[dict]:
    buffer.flush()
    return list(UsageDaily.objects.values("user_id", "facet", "model_requested", "requests", "errors",
                                          "prompt_tokens", "completion_tokens", "cost"))


def _tts(client, text: str = TEXT, provider: str = "hosted"):
    return client.post("/api/voice/tts", {"text": text, "provider": provider, "format": "wav"}, format="json")


def _stt(client, seconds: float):
    from django.core.files.uploadedfile import SimpleUploadedFile

    audio = SimpleUploadedFile("speech.wav", tone(seconds=seconds, fmt="wav"))
    return client.post("/api/voice/stt", {"file": audio, "provider": "hosted"}, format="multipart")


def _refused(response) -> dict:
    assert response.status_code == 429, response.content[:300]
    assert int(response["Retry-After"]) > 0
    return response.json()["error"]


def test_hosted_tts_is_recorded_under_voice_as_its_characters_at_the_models_price(owner, owner_client, hosted):
    ModelPrice.objects.create(model="tts-1", input_per_million=60.0, output_per_million=0.0)  # $15 / M characters
    prices.drop()
    assert _tts(owner_client).status_code == 200
    assert _rows() == [{"user_id": owner.pk, "facet": "voice", "model_requested": "tts-1", "requests": 1, "errors": 0,
                        "prompt_tokens": 3, "completion_tokens": 0, "cost": pytest.approx(3 * 60.0 / 1_000_000)}]
    report = owner_client.get("/api/usage", {"group_by": "facet"}).json()
    assert [(row["facet"], row["total_tokens"]) for row in report["results"]] == [("voice", 3)]


def test_hosted_stt_is_recorded_under_voice_as_ten_tokens_a_second_of_audio(owner, owner_client, hosted):
    response = _stt(owner_client, 2.0)
    assert response.status_code == 200, response.content[:300]
    assert response.json()["duration_s"] == pytest.approx(2.0, abs=0.01)
    [row] = _rows()
    assert (row["facet"], row["model_requested"], row["prompt_tokens"]) == ("voice", "whisper-1", 20)


def test_hosted_tts_that_fills_the_budget_exactly_is_spoken_and_one_token_more_is_refused_unasked(
        owner, owner_client, hosted):
    _budget(owner, tokens_per_day=2)
    error = _refused(_tts(owner_client))
    assert error["code"] == "budget_exceeded" and error["details"]["needed"] == 3
    assert hosted.requests == []  # the service was never asked
    _budget(owner, tokens_per_day=3)
    assert _tts(owner_client).status_code == 200
    assert _refused(_tts(owner_client))["code"] == "budget_exceeded"  # all 3 spent
    assert len(hosted.speeches()) == 1


def test_hosted_stt_past_the_budget_is_refused_before_the_service_is_called(owner, owner_client, hosted):
    _budget(owner, tokens_per_day=19)
    error = _refused(_stt(owner_client, 2.0))
    assert error["code"] == "budget_exceeded" and error["details"]["needed"] == 20
    assert hosted.requests == []
    _budget(owner, tokens_per_day=20)
    assert _stt(owner_client, 2.0).status_code == 200


def test_hosted_speech_takes_a_request_of_the_minute(owner, owner_client, hosted, one_minute):
    _budget(owner, requests_per_minute=1)
    assert _tts(owner_client).status_code == 200
    assert _refused(_tts(owner_client))["code"] == "rate_limited"


def test_a_failed_hosted_call_counts_as_an_error_with_no_tokens_and_frees_its_hold(owner, owner_client, hosted):
    _budget(owner, tokens_per_day=100)
    hosted.script(FakeResponse.json({"error": {"message": "overloaded"}}, 500))
    assert _tts(owner_client).status_code == 502
    [row] = _rows()
    assert (row["requests"], row["errors"], row["prompt_tokens"]) == (1, 1, 0)
    scope = budgets.Scope(f"u:{owner.pk}", {"tokens_per_day": 100})
    assert budgets.used(scope)["h"]["t"] == 0
    assert budgets.remaining(scope)["tokens_per_day"]["remaining"] == 100


def test_speech_that_spends_no_upstream_key_is_neither_metered_nor_refused(owner, owner_client, hosted):
    _budget(owner, tokens_per_day=0)
    response = _tts(owner_client, provider="browser")
    assert response.status_code == 200 and response.json()["fallback"] is True
    assert _rows() == []


def test_an_api_keys_budget_binds_hosted_speech_made_with_it(owner, owner_client, hosted):
    from rest_framework.test import APIClient

    from accounts.services import key_create

    key, secret = key_create(user=owner, name="speaker", scopes=["api"], budget={"tokens_per_day": 5})
    with_key = APIClient()
    with_key.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert _tts(with_key).status_code == 200  # 3 of its 5
    error = _refused(_tts(with_key))
    assert error["code"] == "budget_exceeded" and "API key" in error["message"]
    assert error["details"] == {"limit": "tokens_per_day", "retry_after": error["details"]["retry_after"],
                                "needed": 3, "left": 2}
    assert _tts(owner_client).status_code == 200  # without the key: not bound by it
    buffer.flush()
    by_key = {row["key_id"]: row["prompt_tokens"] for row in UsageDaily.objects.values("key_id", "prompt_tokens")}
    assert by_key == {str(key.pk): 3, "": 3}
