"""Speech-to-text accuracy: word error rate of the local provider on espeak-ng speech, and its real-time factor.

    python bench/stt_accuracy.py [--configs before,tiny.en/1,tiny.en/5,base/1,base/5] [--voices ...] [--limit N]

Each sentence below is spoken by espeak-ng in each voice (en-us and en-gb at espeak-ng's 175 words a minute,
and en-us slowed to 140) and transcribed through the `local` provider (voice/speech/providers/whisper.py)
with the language left out, as the dashboard's dictation sends it. The sentences are also joined three by
three into passages of 7-10 s, spoken and transcribed whole: the real-time factor target (<= 0.3 on 2 cores,
bench/voice.py's figure) is for those; a lone sentence of 2-4 s costs nearly as much as a passage, because
Whisper pads every window to 30 s, so its factor is printed apart.

A configuration is `model/beam` (model: a name AGENTSITE_STT_MODEL takes) with the provider's decoding
options (WhisperDecoding), plus `+vad` for faster-whisper's voice-activity filter and `+padN` for N seconds of
silence around each clip (the provider's stt_pad_s; `+pad0` hears the clip as recorded); `before` is the
provider as it first was: tiny.en, beam 1, faster-whisper's temperature fallback and timestamps, no padding.
Prints, per configuration, the word error rate per voice and over all (sentences, passages, both), the
real-time factor (wall time) and the CPU seconds per second of audio (the machine is shared: that one does not
grow with others' load), and every sentence a configuration got wrong when --show is given.

Word error rate: (substituted + deleted + inserted words) / words said, after lower-casing, dropping
punctuation and writing digits as words ("4 o'clock" is "four o'clock"), over the whole set.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = [
    "Hello world, this is a test.",
    "The quick brown fox jumps over the lazy dog.",
    "Please schedule a meeting with the marketing team tomorrow morning.",
    "Remind me to call the dentist at four o'clock this afternoon.",
    "What is the weather like in London today?",
    "Turn off the lights in the living room.",
    "Send the quarterly report to everyone on the project before Friday.",
    "Search the knowledge base for the latest notes on the product launch.",
    "How many people signed up for the newsletter last week?",
    "Add milk, eggs and bread to my shopping list.",
    "Summarize the last three emails from my manager.",
    "The train to Manchester leaves from platform seven.",
    "Can you translate this paragraph into Spanish?",
    "Set a timer for twenty minutes.",
    "Write a short poem about the ocean at night.",
    "Cancel my appointment on Tuesday and book a new one for Thursday.",
    "The server restarted twice during the night because the disk was full.",
    "Who won the football match yesterday evening?",
    "Open the workflow editor and run the nightly backup.",
    "I would like a cup of tea with lemon, please.",
    "Read the first chapter of the book aloud.",
    "The meeting has been moved to the large conference room.",
    "Please check the logs and tell me why the build failed.",
    "Play some quiet music while I work.",
]
VOICES = {"en-us": ("en-us", 175), "en-gb": ("en-gb", 175), "en-us-slow": ("en-us", 140),
          # The local TTS provider's preset voices (voice/speech/voices.py): what a round trip speaks.
          "en-us+f3": ("en-us+f3", 175), "en-us+m3": ("en-us+m3", 175), "en-gb+f3": ("en-gb+f3", 175),
          "en-gb+m3": ("en-gb+m3", 175)}
FALLBACK = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # faster-whisper's default temperatures


def setup_django(data_dir: str) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["AGENTSITE_DATA_DIR"] = data_dir
    os.environ["AGENTSITE_LOG_LEVEL"] = "WARNING"
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentsite.settings"
    import django

    django.setup()


# --- word error rate ------------------------------------------------------------------------------------------

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
         "seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_words(number: int) -> str:
    if number < 20:
        return _ONES[number]
    if number < 100:
        return _TENS[number // 10] + ("" if number % 10 == 0 else " " + _ONES[number % 10])
    if number < 1000:
        rest = number % 100
        return _ONES[number // 100] + " hundred" + ("" if rest == 0 else " " + number_words(rest))
    return " ".join(_ONES[int(digit)] for digit in str(number))


def normalized(text: str) -> list[str]:
    text = text.lower().replace("-", " ")
    text = re.sub(r"\d+", lambda match: f" {number_words(int(match.group()))} ", text)
    text = re.sub(r"[^a-z' ]+", " ", text)
    return [word.strip("'") for word in text.split() if word.strip("'")]


def word_errors(reference: list[str], heard: list[str]) -> int:
    """Levenshtein distance in words: substitutions + deletions + insertions."""
    previous = list(range(len(heard) + 1))
    for index, said in enumerate(reference, 1):
        current = [index]
        for position, got in enumerate(heard, 1):
            current.append(min(previous[position] + 1, current[position - 1] + 1,
                               previous[position - 1] + (said != got)))
        previous = current
    return previous[-1]


# --- speech -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Clip:
    voice: str
    kind: str  # sentence | passage
    text: str
    audio: object  # DecodedAudio


def passages() -> list[str]:
    return [" ".join(SENTENCES[index:index + 3]) for index in range(0, len(SENTENCES), 3)]


def spoken(text: str, voice: str):
    from voice.speech.audio import audio_decode

    name, rate = VOICES[voice]
    wav = subprocess.run(["espeak-ng", "-v", name, "-s", str(rate), "--stdout", text], capture_output=True,
                         check=True).stdout
    return audio_decode(wav, field="file", max_seconds=120, declared="wav")


def clips(voices: list[str], limit: int | None) -> list[Clip]:
    sentences, joined = SENTENCES[:limit], passages()[:None if limit is None else max(1, limit // 3)]
    return [Clip(voice, kind, text, spoken(text, voice)) for voice in voices
            for kind, texts in (("sentence", sentences), ("passage", joined)) for text in texts]


# --- configurations ---------------------------------------------------------------------------------------------

@dataclass
class Tally:
    errors: int = 0
    words: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    audio_s: float = 0.0

    def add(self, errors: int, words: int, wall_s: float, cpu_s: float, audio_s: float) -> None:
        self.errors += errors
        self.words += words
        self.wall_s += wall_s
        self.cpu_s += cpu_s
        self.audio_s += audio_s

    @property
    def wer(self) -> float:
        return self.errors / max(self.words, 1)


@dataclass
class Result:
    name: str
    tallies: dict[tuple[str, str], Tally] = field(default_factory=dict)  # (voice | "all", kind | "all")
    wrong: list[tuple[Clip, str]] = field(default_factory=list)
    load_s: float = 0.0

    def tally(self, voice: str, kind: str) -> Tally:
        return self.tallies.setdefault((voice, kind), Tally())


def settings_of(config: str):
    """SpeechSettings for `before` or `model/beam[+vad]`."""
    from voice.speech.providers import SpeechSettings
    from voice.speech.providers.base import WhisperDecoding

    if config == "before":
        return SpeechSettings(stt_model="tiny.en", stt_beam_size=1, stt_pad_s=0.0,
                              stt_decoding=WhisperDecoding(temperature=FALLBACK, without_timestamps=False))
    spec, *extras = config.split("+")
    model, _, beam = spec.partition("/")
    decoding = WhisperDecoding()
    if "vad" in extras:
        decoding = replace(decoding, vad_filter=True)
    pad = next((float(extra[3:]) for extra in extras if extra.startswith("pad")), SpeechSettings.stt_pad_s)
    return SpeechSettings(stt_model=model, stt_beam_size=int(beam or 1), stt_decoding=decoding,
                          stt_language="en" if "en" in extras else "", stt_pad_s=pad)


async def measure(config: str, clips_: list[Clip]) -> Result:
    from voice.speech.providers import stt_provider_get
    from voice.speech.providers.whisper import model_get, model_source

    settings = settings_of(config)
    result = Result(config)
    started = time.perf_counter()
    model_get(model_source(settings.stt_model))
    result.load_s = time.perf_counter() - started
    stt = stt_provider_get("local", settings)
    await stt.transcribe(clips_[0].audio, language=None)  # warm
    for clip in clips_:
        wall, cpu = time.perf_counter(), time.process_time()
        heard = (await stt.transcribe(clip.audio, language=None)).text
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        reference = normalized(clip.text)
        errors = word_errors(reference, normalized(heard))
        for voice in (clip.voice, "all"):
            for kind in (clip.kind, "all"):
                result.tally(voice, kind).add(errors, len(reference), wall, cpu, clip.audio.duration_s)
        if errors:
            result.wrong.append((clip, heard))
    return result


def report(result: Result, voices: list[str], show: bool) -> None:
    def cell(tally: Tally) -> str:
        return f"{tally.wer:6.1%}"

    print(f"\n== {result.name} (model load {result.load_s:.2f} s)")
    print(f"   {'WER':<12} {'sentences':>10} {'passages':>10} {'both':>8}")
    for voice in [*voices, "all"]:
        row = [cell(result.tally(voice, kind)) for kind in ("sentence", "passage", "all")]
        print(f"   {voice:<12} {row[0]:>10} {row[1]:>10} {row[2]:>8}")
    for kind, label in (("passage", "passages (7-10 s)"), ("sentence", "sentences (2-4 s)")):
        tally = result.tally("all", kind)
        print(f"   real-time factor, {label}: {tally.wall_s / tally.audio_s:.3f} wall, "
              f"{tally.cpu_s / tally.audio_s:.3f} CPU s per audio s ({tally.wall_s:.1f} s for {tally.audio_s:.1f} s)")
    if show:
        for clip, heard in result.wrong:
            print(f"   [{clip.voice} {clip.kind}] said: {clip.text}\n{'':>{len(clip.voice) + len(clip.kind) + 6}}"
                  f"heard: {heard}")


def summary(results: list[Result]) -> None:
    print("\n| configuration | WER sentences | WER passages | WER both | passages: RTF wall / CPU s per audio s "
          "| sentences: RTF wall / CPU s per audio s |")
    print("|---|---|---|---|---|---|")
    for result in results:
        sentence, passage, both = (result.tally("all", kind) for kind in ("sentence", "passage", "all"))
        print(f"| {result.name} | {sentence.wer:.1%} | {passage.wer:.1%} | {both.wer:.1%} | "
              f"{passage.wall_s / passage.audio_s:.2f} / {passage.cpu_s / passage.audio_s:.3f} | "
              f"{sentence.wall_s / sentence.audio_s:.2f} / {sentence.cpu_s / sentence.audio_s:.3f} |")


async def main(configs: list[str], voices: list[str], limit: int | None, show: bool) -> None:
    started = time.perf_counter()
    made = clips(voices, limit)
    sentences = sum(clip.kind == "sentence" for clip in made)
    print(f"{sentences} sentences and {len(made) - sentences} passages spoken ({', '.join(voices)}) in "
          f"{time.perf_counter() - started:.1f} s; {os.cpu_count()} cores; load average "
          f"{' '.join(f'{value:.1f}' for value in os.getloadavg())}")
    results = []
    for config in configs:
        results.append(await measure(config, made))
        report(results[-1], voices, show)
    summary(results)
    print(f"\nload average at the end: {' '.join(f'{value:.1f}' for value in os.getloadavg())}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="before,tiny.en/1,tiny.en/5,base/1,base/5",
                        help="comma-separated: before, or model/beam with an optional +vad")
    parser.add_argument("--voices", default=",".join(VOICES), help=f"comma-separated, of {', '.join(VOICES)}")
    parser.add_argument("--limit", type=int, default=None, help="only the first N sentences (exploring)")
    parser.add_argument("--show", action="store_true", help="print what each configuration got wrong")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentsite-bench-stt-") as directory:
        setup_django(directory)
        asyncio.run(main(args.configs.split(","), args.voices.split(","), args.limit, args.show))
