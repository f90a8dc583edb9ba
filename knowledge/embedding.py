"""Hash embeddings: 256-d signed bag-of-words vectors with no model to download (the `hash-256` model of /v1).

Words come from `tokenize` (its docstring gives the rules); each word's MD5 picks a dimension and a sign, so
collisions cancel out on average, and the sum is L2-normalised (a text without words gives the zero vector).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from itertools import chain

import numpy as np

DIMENSIONS = 256
MODEL_NAME = "hash-256"

_CJK = (
    "\u3005-\u3007"  # 々〆〇
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0003134f"  # CJK extensions B–G
)
_WORD = re.compile(rf"\d+(?:[.,]\d+)+|[^\W_{_CJK}]+")
_CJK_RUN = re.compile(f"[{_CJK}]+")
_ASCII_NUMBER = re.compile(r"\d[.,]\d")
_ASCII_SEPARATORS = str.maketrans({chr(code): " " for code in range(128) if not chr(code).isalnum()})

_BLOCK = 4096  # texts embedded per NumPy pass in embed_many: bounds the scratch memory


def tokenize(text: str) -> list[str]:
    """The words of text (order is not meaningful). Tokenisation, exactly:

    1. The text is NFKC-normalised (full-width Ｌｅｔｔｅｒｓ and digits become ASCII, ligatures split) and
       case-folded (lower case, `ß` → `ss`).
    2. A word is a run of letters and digits (any script, including accents, Cyrillic, Greek, Hangul,
       Arabic); everything else (punctuation, symbols, spaces, underscores) separates words and is dropped.
       Numbers are words; a decimal or grouped number stays one word (`3.14`, `1,000`).
    3. Chinese and Japanese (Han ideographs, Hiragana, Katakana) have no spaces between words, so a run of
       them yields every single character and every adjacent pair as words: `大熊猫` → `大 熊 猫 大熊 熊猫`.
       Such runs also end any Latin word they touch (`GPT模型` → `gpt`, `模`, `型`, `模型`).
    """
    if text.isascii() and not _ASCII_NUMBER.search(text):
        # The same words as below for most English text, at a third of the cost: ingest speed rests on this.
        return text.lower().translate(_ASCII_SEPARATORS).split()
    return _unicode_words(text)


def _unicode_words(text: str) -> list[str]:
    text = unicodedata.normalize("NFKC", text).casefold()
    words = _WORD.findall(text)
    for run in _CJK_RUN.findall(text):
        words.extend(run)
        words.extend(run[i:i + 2] for i in range(len(run) - 1))
    return words


class _CodeCache(dict):
    """word → signed bucket code (bucket + 256 × sign bit), hashing each distinct word once.

    Natural text repeats a small vocabulary, so ingest mostly does dict lookups instead of MD5 calls.
    """

    limit = 500_000

    def __missing__(self, word: str) -> int:
        digest = hashlib.md5(word.encode("utf-8"), usedforsecurity=False).digest()
        code = digest[0] | (digest[1] & 1) << 8
        if len(self) >= self.limit:
            self.clear()  # crude but bounded; a rebuilt cache costs one MD5 per word again
        self[word] = code
        return code


_codes = _CodeCache()


def word_codes(words: Sequence[str]) -> list[int]:
    return list(map(_codes.__getitem__, words))


_SHORT_TEXT_WORDS = 64  # up to this many words, embed() sums them one by one (cheaper than a NumPy pass)


def embed(text: str) -> np.ndarray:
    """The unit-length float32 vector of text, shape (256,); zeros when text has no words."""
    codes = word_codes(tokenize(text))
    if len(codes) > _SHORT_TEXT_WORDS:
        return _embed_block([text])[0]
    # Every search embeds its query: the NumPy pass of embed_many costs ~30 µs, this a few for a short one.
    # The sums are small integers, exact in float32, so the vector is bit for bit what embed_many gives.
    vector = np.zeros(DIMENSIONS, dtype=np.float32)
    for code in codes:
        vector[code & 0xFF] += 1 - ((code >> 8) << 1)
    norm = np.sqrt(np.dot(vector, vector))
    if norm > 0:
        vector /= norm
    return vector


def embed_many(texts: Sequence[str], words: Sequence[Sequence[str]] | None = None) -> np.ndarray:
    """Vectors of several texts, float32, shape (len(texts), 256); row i is embed(texts[i]).

    words: tokenize(texts[i]) for each i, when the caller has them already (ingest tokenises once).
    """
    blocks = [_embed_block(texts[i:i + _BLOCK], None if words is None else words[i:i + _BLOCK])
              for i in range(0, len(texts), _BLOCK)]
    return np.concatenate(blocks) if blocks else np.zeros((0, DIMENSIONS), dtype=np.float32)


def _embed_block(texts: Sequence[str], words: Sequence[Sequence[str]] | None = None) -> np.ndarray:
    if words is None:
        words = [tokenize(text) for text in texts]
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    # One pass over every word of the block: no list of codes per text.
    codes = np.fromiter(map(_codes.__getitem__, chain.from_iterable(words)), dtype=np.int64,
                        count=int(lengths.sum()))
    rows = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)
    signs = 1.0 - 2.0 * (codes >> 8)
    sums = np.bincount(rows * DIMENSIONS + (codes & 0xFF), weights=signs, minlength=len(texts) * DIMENSIONS)
    vectors = sums.reshape(len(texts), DIMENSIONS).astype(np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    np.divide(vectors, norms, out=vectors, where=norms > 0)
    return vectors


def to_bytes(vector: np.ndarray) -> bytes:
    """The storage form of a vector: 256 little-endian float32 values."""
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def from_bytes(data: bytes | memoryview) -> np.ndarray:
    return np.frombuffer(data, dtype="<f4").astype(np.float32)
