"""Web search backends, one module each behind SearchBackend."""
