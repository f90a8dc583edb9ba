"""The preset voices (edge-tts voice ids) and how a requested voice name is read for each provider."""

from __future__ import annotations

import re
from dataclasses import dataclass

# A voice name as the API takes it: an edge-tts id, an alias such as `en-us-female`, a hosted provider's own
# name (`nova`), or an espeak-ng voice (`en-us+f3`). No leading dash: it must never read as a program option.
VOICE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_+-]{0,99}$"
# edge-tts ids: `<lang>-<REGION>[-<variant>]-<Name>Neural` (en-US-AriaNeural, zh-CN-liaoning-XiaobeiNeural).
EDGE_VOICE_ID = re.compile(r"^([a-z]{2,3})((?:-[A-Za-z]{2,8}){1,2})-[A-Za-z]+Neural$")
# `<language>-<gender>` picks the first preset of that language and gender (the config's default, en-us-female).
_ALIAS = re.compile(r"^([a-z]{2,3}-[a-z]{2})-(female|male)$")


@dataclass(frozen=True)
class Voice:
    id: str  # the edge-tts voice id
    name: str
    language: str  # BCP 47, as edge-tts spells it
    gender: str  # female | male
    espeak: str  # the espeak-ng voice the local provider speaks it with

    @property
    def espeak_voice(self) -> str:
        return f"{self.espeak}+{'f3' if self.gender == 'female' else 'm3'}"


PRESETS: tuple[Voice, ...] = (
    Voice("en-US-AriaNeural", "Aria", "en-US", "female", "en-us"),
    Voice("en-US-JennyNeural", "Jenny", "en-US", "female", "en-us"),
    Voice("en-US-GuyNeural", "Guy", "en-US", "male", "en-us"),
    Voice("en-GB-SoniaNeural", "Sonia", "en-GB", "female", "en-gb"),
    Voice("en-GB-RyanNeural", "Ryan", "en-GB", "male", "en-gb"),
    Voice("zh-CN-XiaoxiaoNeural", "Xiaoxiao", "zh-CN", "female", "cmn"),
    Voice("zh-CN-YunxiNeural", "Yunxi", "zh-CN", "male", "cmn"),
    Voice("zh-TW-HsiaoChenNeural", "HsiaoChen", "zh-TW", "female", "cmn"),
    Voice("ja-JP-NanamiNeural", "Nanami", "ja-JP", "female", "ja"),
    Voice("ja-JP-KeitaNeural", "Keita", "ja-JP", "male", "ja"),
)
_BY_ID = {voice.id.lower(): voice for voice in PRESETS}
# espeak-ng's names for languages whose BCP 47 subtag it does not use.
_ESPEAK_LANGUAGES = {"zh": "cmn"}


@dataclass(frozen=True)
class VoiceChoice:
    """A requested voice, read: a preset, another edge-tts id (with its language), or a name to pass on as is."""

    requested: str
    preset: Voice | None = None
    edge_id: str | None = None  # set for presets and edge-shaped ids
    language: str | None = None

    @property
    def id(self) -> str:
        return self.edge_id or self.requested

    @property
    def gender(self) -> str | None:
        return self.preset.gender if self.preset else None

    def espeak_voice(self) -> str:
        """The espeak-ng voice: a preset's own, an edge id's language, or the name as given."""
        if self.preset:
            return self.preset.espeak_voice
        if self.language:
            primary = self.language.split("-")[0].lower()
            return _ESPEAK_LANGUAGES.get(primary, primary)
        return self.requested


def voice_choose(name: str) -> VoiceChoice:
    """Read a voice name (already matching VOICE_NAME_PATTERN): a preset id (any case), an alias, an edge id."""
    preset = _BY_ID.get(name.lower())
    alias = _ALIAS.match(name.lower())
    if preset is None and alias:
        language, gender = alias.groups()
        preset = next((voice for voice in PRESETS if voice.language.lower() == language and voice.gender == gender),
                      None)
    if preset is not None:
        return VoiceChoice(name, preset, preset.id, preset.language)
    edge = EDGE_VOICE_ID.match(name)
    if edge:
        return VoiceChoice(name, None, name, f"{edge.group(1)}-{edge.group(2).split('-')[1]}")
    return VoiceChoice(name)
