"""The test settings (pyproject: DJANGO_SETTINGS_MODULE): the environment first, then the real settings.

Every test process gets its own data dir (so tests never touch ./data and parallel runs never share a
database file), runs queued tasks inline, and has a cache prefix of its own (so clearing this
process's cache never touches a live server's keys in a shared Redis).
"""

import os
import tempfile

os.environ.setdefault("AGENTSITE_DATA_DIR", tempfile.mkdtemp(prefix="agentsite-test-data-"))
os.environ.setdefault("AGENTSITE_Q_SYNC", "1")
os.environ["AGENTSITE_CACHE_PREFIX"] = f"test-{os.getpid()}"

from agentsite.settings import *  # noqa: E402,F403
