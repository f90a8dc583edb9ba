import hashlib
import random
import string

import numpy as np

from knowledge.embedding import DIMENSIONS, _unicode_words, embed, embed_many, from_bytes, to_bytes, tokenize


def test_embedding_is_256_float32_values_of_unit_length():
    vector = embed("The quick brown fox jumps over the lazy dog.")
    assert vector.shape == (DIMENSIONS,)
    assert vector.dtype == np.float32
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-6


def test_embedding_is_deterministic_and_matches_the_md5_definition():
    assert np.array_equal(embed("hello world hello"), embed("hello world hello"))
    expected = np.zeros(DIMENSIONS)
    for word in ["hello", "world", "hello"]:
        digest = hashlib.md5(word.encode()).digest()
        expected[digest[0]] += -1.0 if digest[1] & 1 else 1.0
    expected /= np.linalg.norm(expected)
    assert np.allclose(embed("Hello, WORLD! hello"), expected, atol=1e-6)


def test_a_text_without_words_embeds_to_zeros():
    assert not embed("").any()
    assert not embed("  ... !!! ---").any()


def test_embed_many_matches_embed_row_by_row():
    texts = ["alpha beta", "", "gamma 3.14", "大熊猫", "alpha beta"] * 1000  # more than one NumPy block
    vectors = embed_many(texts)
    assert vectors.shape == (len(texts), DIMENSIONS)
    assert vectors.dtype == np.float32
    for row in (0, 1, 2, 3, 4999):
        assert np.array_equal(vectors[row], embed(texts[row]))
    assert embed_many([]).shape == (0, DIMENSIONS)


def test_tokens_are_case_folded_words_and_numbers_without_punctuation():
    assert tokenize("Hello, World! It's 3.14 or 1,000 snake_case ＦＵＬＬ２") == [
        "hello", "world", "it", "s", "3.14", "or", "1,000", "snake", "case", "full2"]


def test_chinese_and_japanese_yield_every_character_and_every_adjacent_pair():
    assert sorted(tokenize("大熊猫")) == sorted(["大", "熊", "猫", "大熊", "熊猫"])
    assert sorted(tokenize("GPT模型")) == sorted(["gpt", "模", "型", "模型"])
    assert "東京" in tokenize("東京に行きます")


def test_related_texts_score_higher_than_unrelated_ones():
    query = embed("大熊猫吃什么")
    assert float(query @ embed("大熊猫主要吃竹子。")) > float(query @ embed("长城是中国古代的军事防御工程。"))
    query = embed("How tall is a giraffe?")
    assert float(query @ embed("A giraffe is tall.")) > float(query @ embed("Penguins swim in cold water."))


def test_vectors_survive_the_storage_round_trip():
    vector = embed("round trip")
    stored = to_bytes(vector)
    assert len(stored) == DIMENSIONS * 4
    assert np.array_equal(from_bytes(stored), vector)
    assert np.array_equal(from_bytes(memoryview(stored)), vector)


def test_the_fast_path_for_ascii_text_finds_the_same_words_as_the_general_one():
    rng = random.Random(3)
    alphabet = string.ascii_letters + string.digits + string.punctuation + " \t\n\x00\x1f"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200)))
        assert tokenize(text) == _unicode_words(text), text
