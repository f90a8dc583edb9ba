"""A container's health check: `python -m agentsite.server.healthcheck [URL]` exits 0 when /api/health answers 200.

The image's HEALTHCHECK and compose.yaml run it inside the container (default URL http://127.0.0.1:8000/api/health).
It sends a Host the server accepts, the first plain name of AGENTSITE_ALLOWED_HOSTS (`*` or a `.domain` pattern:
`localhost`), so a deployment that serves only its public name is not reported unhealthy for the Host of a
loopback request. Standard library only, and no Django: it starts in a fraction of a second every interval.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8000/api/health"
TIMEOUT_S = 4.0


def host_header(allowed_hosts: str | None) -> str:
    """The Host to send: the first allowed name that is a plain host (not `*`, not a `.domain` pattern)."""
    for name in (allowed_hosts or "localhost").split(","):
        name = name.strip()
        if name and name != "*" and not name.startswith("."):
            return name
    return "localhost"


def check(url: str = DEFAULT_URL) -> tuple[bool, str]:
    """(healthy, what was seen)."""
    request = urllib.request.Request(url, headers={"Host": host_header(os.environ.get("AGENTSITE_ALLOWED_HOSTS"))})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:  # noqa: S310 (a URL the operator gives)
            return response.status == 200, f"{url}: {response.status}"
    except urllib.error.HTTPError as error:
        return False, f"{url}: {error.code}"
    except (OSError, ValueError) as error:
        return False, f"{url}: {error}"


def main(argv: list[str]) -> int:
    healthy, seen = check(argv[0] if argv else DEFAULT_URL)
    if not healthy:
        print(f"unhealthy: {seen}", file=sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
