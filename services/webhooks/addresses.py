"""Where a webhook may go: only public unicast addresses, unless private ones are explicitly allowed.

A callback URL is chosen by the tenant, so without this check a webhook is a request the platform makes
on the tenant's behalf into its own network (SSRF): the cloud metadata service (169.254.169.254),
localhost admin ports, the cluster's private range. The host is resolved and EVERY address checked
before sending; `GuardedResolver` checks again inside the connector, on the very addresses the socket is
opened to, so a DNS answer that changes between check and connect (rebinding) is caught too.
"""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

# The rule itself is shared with the gateway, which refuses at submit what would be refused here.
from spotreel.webhooks.targets import RefusedAddress, host_of, literal_address, why_refused

__all__ = ["GuardedResolver", "RefusedAddress", "check_addresses", "check_url", "host_of", "why_refused"]


def check_addresses(host: str, addresses: list[str], allow_private: bool) -> None:
    if not addresses:
        raise RefusedAddress(f"{host} resolves to no address")
    if allow_private:
        return
    for a in addresses:
        reason = why_refused(a)
        if reason is not None:
            raise RefusedAddress(f"{host}: {reason}")


class GuardedResolver(AbstractResolver):
    """aiohttp resolver that refuses to hand the connector a non-public address (checked at connect time)."""

    def __init__(self, allow_private: bool, inner: AbstractResolver | None = None) -> None:
        self.allow_private = allow_private
        self.inner = inner or DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
                      ) -> list[ResolveResult]:
        results = await self.inner.resolve(host, port, family)
        check_addresses(host, [r["host"] for r in results], self.allow_private)
        return results

    async def close(self) -> None:
        await self.inner.close()


async def check_url(url: str, allow_private: bool, resolver: AbstractResolver | None = None) -> None:
    """Before sending: resolve the URL's host and check every address (literal IPs included, which
    aiohttp's connector would not pass through any resolver)."""
    host, port = host_of(url)
    literal = literal_address(host)
    if literal is not None:
        check_addresses(host, [literal], allow_private)
        return
    resolver = resolver or DefaultResolver()
    try:
        results = await resolver.resolve(host, port, socket.AF_UNSPEC)
    except OSError as exc:
        raise RefusedAddress(f"{host} does not resolve: {exc}") from None
    check_addresses(host, [r["host"] for r in results], allow_private)
