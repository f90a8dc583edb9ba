"""Speech: the preset voices, speech-to-text and text-to-speech, each behind a small provider registry.

`api.py` (views) -> `services.py` -> `providers/` (hosted, edge, local: espeak-ng and faster-whisper, browser),
with `audio.py` (PyAV decoding and encoding) and `programs.py` (subprocesses with time limits) underneath.
"""
