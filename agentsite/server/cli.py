"""The `agentsite` command of an installed package: manage.py's commands without a checkout.

`agentsite serve`, `agentsite migrate`, `agentsite runmcp`, `agentsite createsuperuser`, ... run exactly what
`python manage.py <command>` runs in a checkout, with the same settings module; the data directory is
`AGENTSITE_DATA_DIR`, else `./data` under the directory the command is run from (docs: the README).
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    # After the settings module is named: Django reads it when its management package loads.
    from django.core.management import execute_from_command_line

    execute_from_command_line(["agentsite", *sys.argv[1:]])


if __name__ == "__main__":
    main()
