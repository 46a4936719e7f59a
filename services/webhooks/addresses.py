"""Where a webhook may go: only public unicast addresses, unless private ones are explicitly allowed.

A callback URL is chosen by the tenant, so without this check a webhook is a request the platform makes
on the tenant's behalf into its own network (SSRF): the cloud metadata service (169.254.169.254),
localhost admin ports, the cluster's private range. The host is resolved and EVERY address checked
before sending; `GuardedResolver` checks again inside the connector, on the very addresses the socket is
opened to, so a DNS answer that changes between check and connect (rebinding) is caught too.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class RefusedAddress(Exception):
    """The callback resolves to an address webhooks must not reach."""


def _unwrap(ip: IPAddress) -> IPAddress:
    """The IPv4 address hiding inside an IPv4-mapped, 6to4 or Teredo IPv6 address, if any."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip.teredo is not None:
            return ip.teredo[1]
    return ip


def why_refused(address: str) -> str | None:
    """None when `address` is a public unicast address; otherwise what it is."""
    try:
        ip = _unwrap(ipaddress.ip_address(address.split("%", 1)[0]))
    except ValueError:
        return f"{address!r} is not an IP address"
    for label, hit in (("loopback", ip.is_loopback), ("link-local", ip.is_link_local),
                       ("multicast", ip.is_multicast), ("unspecified", ip.is_unspecified),
                       ("private", ip.is_private), ("reserved", ip.is_reserved)):
        if hit:
            return f"{ip} is a {label} address"
    if isinstance(ip, ipaddress.IPv6Address) and ip in ipaddress.ip_network("fc00::/7"):
        return f"{ip} is a unique-local address"
    if not ip.is_global:  # e.g. 100.64.0.0/10 (carrier-grade NAT), documentation ranges
        return f"{ip} is not a globally routable address"
    return None


def host_of(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RefusedAddress(f"{url!r} is not an http(s) URL with a host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.hostname, port


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
    try:
        ipaddress.ip_address(host.strip("[]"))
        check_addresses(host, [host.strip("[]")], allow_private)
        return
    except ValueError:
        pass
    resolver = resolver or DefaultResolver()
    try:
        results = await resolver.resolve(host, port, socket.AF_UNSPEC)
    except OSError as exc:
        raise RefusedAddress(f"{host} does not resolve: {exc}") from None
    check_addresses(host, [r["host"] for r in results], allow_private)
