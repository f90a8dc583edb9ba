"""The chat door: OpenAI's chat completions, with the models list and embeddings (compat/doors.py)."""
