"""The settings of the servers the tests start (tests/server.py): the product's own, but for the password hash.

Passwords are hashed with the production algorithm and hash format (PBKDF2-SHA256) at a test iteration count, as
in the test process (tests/settings.py): at 1,000,000 iterations each registration and login on a live server
cost 0.35-0.5 s of CPU, and the suite's live servers do thousands. Everything else is agentsite.settings; the
production count itself is checked in tests/foundation/test_settings.py, and `.ci/package_check` and
`.ci/containers` log in to servers on the real settings.
"""

from agentsite.settings import *  # noqa: F403

PASSWORD_HASHERS = ["tests.hashers.QuickPBKDF2PasswordHasher"]
