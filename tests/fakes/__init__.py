"""Fake upstreams over real loopback HTTP: llm.py (OpenAI, Anthropic), web.py (pages, search), fixtures.py."""
