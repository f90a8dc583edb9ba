"""agentsite.core.secretbox: what it seals opens with the same key and purpose only, and a rotated key still
opens what the old one sealed."""

from __future__ import annotations

import pytest

from agentsite.core.secretbox import SecretBoxError, seal, unseal


def test_a_sealed_text_opens_with_the_same_purpose_and_does_not_show_the_text(settings):
    settings.SECRET_KEY = "k" * 50
    sealed = seal("asa-secret-token", purpose="test.one")
    assert "asa-secret-token" not in sealed and sealed.isascii()
    assert unseal(sealed, purpose="test.one") == "asa-secret-token"


def test_sealing_twice_gives_two_different_texts(settings):
    settings.SECRET_KEY = "k" * 50
    assert seal("same", purpose="test.one") != seal("same", purpose="test.one")


def test_a_text_sealed_for_one_purpose_does_not_open_as_another(settings):
    settings.SECRET_KEY = "k" * 50
    with pytest.raises(SecretBoxError):
        unseal(seal("x", purpose="test.one"), purpose="test.two")


def test_one_altered_character_does_not_open(settings):
    settings.SECRET_KEY = "k" * 50
    sealed = seal("x", purpose="test.one")
    middle = len(sealed) // 2
    altered = sealed[:middle] + ("A" if sealed[middle] != "A" else "B") + sealed[middle + 1:]
    with pytest.raises(SecretBoxError):
        unseal(altered, purpose="test.one")


def test_another_key_does_not_open_it_but_the_old_key_as_a_fallback_does(settings):
    settings.SECRET_KEY = "old" * 20
    sealed = seal("x", purpose="test.one")
    settings.SECRET_KEY = "new" * 20
    settings.SECRET_KEY_FALLBACKS = []
    with pytest.raises(SecretBoxError):
        unseal(sealed, purpose="test.one")
    settings.SECRET_KEY_FALLBACKS = ["old" * 20]
    assert unseal(sealed, purpose="test.one") == "x"
