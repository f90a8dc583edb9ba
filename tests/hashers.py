"""The password hasher of the test process and of the servers the tests start (tests/settings.py,
tests/live_settings.py): the production algorithm and hash format, PBKDF2-SHA256, at a test iteration count."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1000
