"""Django's SQLite backend, creating the database's directory (the data dir) on first connect."""
