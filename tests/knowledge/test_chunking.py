import itertools
import random

import pytest

from knowledge.chunking import CHUNK_OVERLAP, CHUNK_SIZE, chunk_spans, chunk_text


def assert_chunking_invariants(text: str) -> None:
    spans = chunk_spans(text)
    covered = [False] * len(text)
    for number, (start, end) in enumerate(spans):
        assert 0 < end - start <= CHUNK_SIZE
        if number:
            previous_start, previous_end = spans[number - 1]
            assert previous_start < start <= previous_end < end
        covered[start:end] = [True] * (end - start)
    assert all(covered), "some characters are in no chunk"


def test_the_empty_text_has_no_chunks():
    assert chunk_text("") == []


def test_a_short_text_is_one_chunk_as_is():
    assert chunk_text("  Hello world. How are you?  ") == ["  Hello world. How are you?  "]


def test_exactly_500_characters_is_one_chunk_and_501_are_two_with_50_overlapping():
    assert chunk_spans("a" * 500) == [(0, 500)]
    assert chunk_spans("a" * 501) == [(0, 500), (450, 501)]


def test_a_sentence_longer_than_a_chunk_is_cut_hard_with_the_overlap_kept():
    text = "x" * 1200
    assert chunk_spans(text) == [(0, 500), (450, 950), (900, 1200)]
    chunks = chunk_text(text)
    assert all(later.startswith(earlier[-CHUNK_OVERLAP:]) for earlier, later in itertools.pairwise(chunks))


def test_a_long_sentence_fills_the_chunk_it_starts_in():
    assert chunk_spans("Hi.\n" + "x" * 1000) == [(0, 500), (450, 950), (900, 1004)]


def test_chunks_end_at_sentence_boundaries_and_start_with_the_previous_50_characters():
    sentence = "b" * 98 + ". "
    text = sentence * 10  # ten sentences of 100 characters
    assert chunk_spans(text) == [(0, 500), (450, 900), (850, 1000)]
    chunks = chunk_text(text)
    assert chunks[1][:CHUNK_OVERLAP] == chunks[0][-CHUNK_OVERLAP:]
    assert all(chunk.endswith(". ") for chunk in chunks)


def test_a_sentence_that_fits_a_chunk_is_never_cut_the_overlap_shrinks_instead():
    text = "a" * 100 + ". " + "b" * 479 + "."  # the second sentence is 480 characters
    spans = chunk_spans(text)
    assert spans == [(0, 102), (len(text) - 500, len(text))]
    assert chunk_text(text)[1].endswith("b" * 479 + ".")


@pytest.mark.parametrize("terminator", ["。", "！", "？", "\n", ".", "!", "?"])
def test_every_terminator_including_full_width_ones_ends_a_sentence(terminator):
    sentence = "字" * 299 + terminator
    text = sentence * 2
    assert chunk_text(text) == [sentence, text[250:]]


def test_chinese_text_splits_at_full_width_punctuation():
    text = ("我们今天学习中文。" * 40 + "你好吗？" * 40 + "太好了！" * 40)
    chunks = chunk_text(text)
    assert len(chunks) > 1
    assert all(chunk[-1] in "。？！" for chunk in chunks)
    assert_chunking_invariants(text)


def test_newlines_end_sentences_and_blank_lines_stay_with_the_sentence_before():
    paragraph = "p" * 200 + "\n\n"
    text = paragraph * 4
    assert chunk_text(text)[0] == paragraph * 2
    assert_chunking_invariants(text)


def test_random_texts_keep_every_character_in_a_chunk_of_at_most_500():
    rng = random.Random(7)
    alphabets = ["ab .", "xxxxxxxxxxxxx.!?\n", "字。！？\n ", "x" * 400 + "."]
    for _ in range(400):
        alphabet = rng.choice(alphabets)
        assert_chunking_invariants("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3000))))
