"""Django's SQLite backend, creating the database file's directory when it first connects.

The settings do not create the data directory when imported (`manage.py help` writes nothing), so whatever
opens the database first (migrate, serve, a test run) creates it here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.backends.sqlite3 import base

from agentsite.core.datadir import data_dir_ensure


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        _directory_ensure(conn_params["database"])
        return super().get_new_connection(conn_params)


def _directory_ensure(database: Any) -> None:
    name = str(database)
    if name == ":memory:" or name.startswith("file:"):
        return  # in memory, or a URI Django's test runner made: nothing to create
    directory = Path(name).expanduser().resolve().parent
    if directory == Path(settings.DATA_DIR) or not directory.exists():
        data_dir_ensure(directory)
    else:
        os.umask(0o077)  # an existing directory of the operator's (a sqlite:/// URL): only the files are ours
