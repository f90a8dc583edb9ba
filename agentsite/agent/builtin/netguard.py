"""Which addresses a server-side fetch may reach, and the one check-then-pin step that enforces it.

A URL's host is resolved once, every address it resolves to is checked, and the connection then goes to
the checked address (the URL keeps its name for the Host header and TLS), so a name that resolves to a
public address when checked and to 127.0.0.1 when connecting (DNS rebinding) cannot slip through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from agentsite.agent.tooltypes import ToolError

logger = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]
AddressCheck = Callable[[IPAddress], str | None]

# Cloud instance metadata endpoints (AWS, GCP, Azure, OpenStack; AWS's IPv6 one; ECS tasks; Alibaba; Oracle).
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(address) for address in (
    "169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200", "192.0.0.192",
))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def address_problem(address: IPAddress) -> str | None:
    """Why a fetch may not go to this address ("a loopback address", ...), or None for a public one."""
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        problem = address_problem(embedded)
        return f"{problem} (inside {address})" if problem else None
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    for test, what in ((address.is_loopback, "a loopback address"), (address.is_link_local, "a link-local address"),
                       (address.is_multicast, "a multicast address"), (address.is_private, "a private address"),
                       (address.is_unspecified, "an unspecified address"), (address.is_reserved, "a reserved address")):
        if test:
            return what
    # Shared (CGNAT) space, benchmarking and documentation ranges and the like are neither private nor global.
    return None if address.is_global else "not a public address"


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries and routes to (mapped, 6to4, Teredo, NAT64), if any."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped:
        return address.ipv4_mapped
    if address.sixtofour:
        return address.sixtofour
    if address.teredo:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


async def system_resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class AddressPolicy:
    """allow_private switches the check off (AGENTSITE_ALLOW_PRIVATE_FETCH); resolver and check are injectable."""

    allow_private: bool = False
    resolver: Resolver = field(default=system_resolve)
    check: AddressCheck = field(default=address_problem)

    async def pin(self, host: str, port: int) -> str:
        """The address to connect to for host:port, after checking every address it resolves to.

        Raises ToolError when the name does not resolve or any of its addresses is not allowed (one bad
        address is enough: which one the connection would use is not ours to choose).
        """
        addresses = await self._addresses(host, port)
        if not self.allow_private:
            for address in addresses:
                problem = self.check(address)
                if problem:
                    shown = host if str(address) == host else f"{host} ({address})"
                    raise ToolError(f"Refusing to fetch from {shown}: it is {problem}. Fetches of private "
                                    "addresses are off (AGENTSITE_ALLOW_PRIVATE_FETCH).")
        return str(addresses[0])

    async def _addresses(self, host: str, port: int) -> list[IPAddress]:
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            pass
        try:
            resolved = await self.resolver(host, port)
        except (OSError, UnicodeError) as exc:
            raise ToolError(f"Could not resolve {host}: {exc}.") from None
        addresses = [ipaddress.ip_address(address.split("%", 1)[0]) for address in resolved]
        if not addresses:
            raise ToolError(f"Could not resolve {host}: no addresses.")
        return addresses
