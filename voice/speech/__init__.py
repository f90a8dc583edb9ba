"""Speech: preset voices, speech-to-text and text-to-speech providers."""
