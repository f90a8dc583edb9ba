"""GET /api/voices: ten preset edge-tts voices, public; and how a requested voice name is read."""

from __future__ import annotations

import re

import pytest

from voice.speech.voices import EDGE_VOICE_ID, PRESETS, voice_choose


def test_the_voice_list_is_public_and_has_ten_presets_in_english_chinese_and_japanese(anon_client):
    response = anon_client.get("/api/voices")
    assert response.status_code == 200, response.content
    voices = response.json()["voices"]
    assert len(voices) == 10
    assert {voice["language"].split("-")[0] for voice in voices} == {"en", "zh", "ja"}
    for voice in voices:
        assert set(voice) == {"id", "name", "language", "gender"}
        assert EDGE_VOICE_ID.match(voice["id"]), voice
        assert voice["id"].startswith(voice["language"] + "-")
        assert voice["gender"] in ("female", "male")
    assert len({voice["id"] for voice in voices}) == 10


def test_the_voice_list_ignores_a_bad_token(anon_client):
    anon_client.credentials(HTTP_AUTHORIZATION="Bearer not-a-token")
    assert anon_client.get("/api/voices").status_code == 200


def test_every_language_has_a_female_and_a_male_preset():
    for language in ("en", "zh", "ja"):
        genders = {voice.gender for voice in PRESETS if voice.language.startswith(language)}
        assert genders == {"female", "male"}, language


@pytest.mark.parametrize(("name", "expected"), [
    ("en-US-GuyNeural", "en-US-GuyNeural"),
    ("EN-us-guyneural", "en-US-GuyNeural"),  # preset ids in any case
    ("en-us-female", "en-US-AriaNeural"),  # the config's default: the first preset of that language and gender
    ("ja-jp-male", "ja-JP-KeitaNeural"),
    ("zh-cn-female", "zh-CN-XiaoxiaoNeural"),
])
def test_presets_and_aliases_resolve_to_a_preset(name, expected):
    choice = voice_choose(name)
    assert choice.preset is not None and choice.edge_id == expected


def test_other_edge_ids_keep_their_language_and_other_names_pass_through():
    french = voice_choose("fr-FR-DeniseNeural")
    assert (french.preset, french.edge_id, french.language, french.espeak_voice()) == (
        None, "fr-FR-DeniseNeural", "fr-FR", "fr")
    dialect = voice_choose("zh-CN-liaoning-XiaobeiNeural")
    assert (dialect.language, dialect.espeak_voice()) == ("zh-CN", "cmn")
    nova = voice_choose("nova")
    assert (nova.preset, nova.edge_id, nova.id, nova.espeak_voice()) == (None, None, "nova", "nova")


def test_preset_espeak_voices_follow_language_and_gender():
    assert voice_choose("en-GB-SoniaNeural").espeak_voice() == "en-gb+f3"
    assert voice_choose("zh-CN-YunxiNeural").espeak_voice() == "cmn+m3"
    assert re.fullmatch(r"ja\+f3", voice_choose("ja-JP-NanamiNeural").espeak_voice())


def test_the_provider_registries_are_the_config_s_choices():
    from catalogue.models import AgentConfig
    from voice.speech.providers import STT_PROVIDERS, TTS_PROVIDERS

    assert list(STT_PROVIDERS) == [name for name, _ in AgentConfig.STT_PROVIDERS]
    assert list(TTS_PROVIDERS) == [name for name, _ in AgentConfig.TTS_PROVIDERS]
