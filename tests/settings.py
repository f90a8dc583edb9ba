"""The test settings (pyproject: DJANGO_SETTINGS_MODULE): the environment first, then the real settings.

Every test process gets its own data dir (so tests never touch ./data and parallel runs never share a
database file), runs queued tasks inline, and has a cache prefix of its own (so clearing this
process's cache never touches a live server's keys in a shared Redis).

Passwords are hashed with the production algorithm (PBKDF2-SHA256, the same hash format) at a test
iteration count: at 1,000,000 iterations every test user costs ~0.5 s of CPU, which was most of the
suite's time. Live servers (tests/server.py) run the real settings with the same test count
(tests/live_settings.py).
"""

import atexit
import os
import shutil
import tempfile

if "AGENTSITE_DATA_DIR" not in os.environ:  # the process that makes the directory removes it when it ends
    os.environ["AGENTSITE_DATA_DIR"] = tempfile.mkdtemp(prefix="agentsite-test-data-")
    atexit.register(shutil.rmtree, os.environ["AGENTSITE_DATA_DIR"], ignore_errors=True)
os.environ.setdefault("AGENTSITE_Q_SYNC", "1")
os.environ["AGENTSITE_CACHE_PREFIX"] = f"test-{os.getpid()}"
# Tests make many accounts from 127.0.0.1, in this process and on the live servers (which inherit this
# environment); the limit itself is tested in tests/accounts/test_register_rate_limit.py, the default asserted.
os.environ.setdefault("AGENTSITE_REGISTER_RATE_LIMIT", "100000")
# And many OAuth authorization requests (the limit: tests/oauth/test_protocol_input.py).
os.environ.setdefault("AGENTSITE_OAUTH_AUTHORIZE_RATE", "100000")

from agentsite.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["tests.hashers.QuickPBKDF2PasswordHasher"]

# Django's test client sends `Host: testserver`; only the tests serve that name (live servers run the real
# settings, whose default is the loopback names alone: tests/foundation/test_settings.py).
ALLOWED_HOSTS = [*ALLOWED_HOSTS, "testserver"]  # noqa: F405

# AGENTSITE_DB_THREADS is production's (a pool of threads): tests/dbthreads.py lets a pool thread see a
# non-transactional test's open transaction.
# No heartbeat thread writing to pytest-django's test database behind a test's back (agentsite/core/processes.py);
# tests of the heartbeat run it themselves, and live servers run the real settings.
AGENTSITE_PROCESS_HEARTBEAT_S = 3600.0
# The dense embedding model (the `dense` extra, which dev installs) is off unless a test turns it on: the other
# knowledge-base tests ingest thousands of chunks and check the hash and lexical signals; tests/knowledge/
# test_dense.py runs the model itself. Live servers run the real setting (on when installed).
AGENTSITE_KB_DENSE = False
AGENTSITE_USAGE_FLUSH_S = 0.0  # no flusher thread in the test process: tests call usage.buffer.flush()
