"""Where a webhook may be sent: the pure rule, shared by the gateway (refuses a callback_url at submit) and
the webhook sender (refuses it again at delivery, after DNS). Two copies would drift apart, and a URL the
gateway accepts but the sender refuses is a webhook silently never sent.

Only public unicast addresses, unless the deployment allows private ones (`webhook_allow_private`: the
local stack's and the tests' receivers listen on loopback). No DNS here: a name is only judged by what it
resolves to at delivery (services/webhooks/addresses.py), except the names that are loopback by definition.

At submit the gateway asks more than the sender does: a URL of the form `callback_pattern` states (the
pattern /openapi.json carries, so a client or a schema-driven fuzzer can tell an acceptable URL from the
document alone). Where private addresses are not allowed that form takes a DNS name only: an IP literal, in
any of the spellings inet_aton reads, would need the address tables in the document to be told apart.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from functools import lru_cache
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# 22: SSH answers every HTTP request with a protocol error, so a webhook there can only fail, and a
# request the platform sends to a tenant-chosen SSH port is a probe, not a delivery. 0: nothing listens.
REFUSED_PORTS = frozenset({0, 22})
# RFC 6761: these names are loopback whatever DNS says; the resolver would only confirm it later.
_LOOPBACK_NAME = re.compile(r"(?:.+\.)?localhost\.?", re.IGNORECASE)
# Numbers the C resolver reads as IPv4 without asking DNS (inet_aton: "2130706433", "0x7f.1", "127.1").
_INET_ATON = re.compile(r"[0-9A-Fa-fXx.]+")


class RefusedAddress(Exception):
    """The callback URL names something webhooks must not reach."""


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
    """(host, port) of an http(s) URL a webhook may be sent to; RefusedAddress otherwise."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError as exc:  # e.g. an unclosed "[" IPv6 bracket, a netloc that NFKC changes
        raise RefusedAddress(f"{url!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise RefusedAddress(f"{url!r} is not an http(s) URL with a host")
    try:
        port = parts.port
    except ValueError:
        raise RefusedAddress(f"{url!r} has no valid port (0-65535)") from None
    if port in REFUSED_PORTS:
        raise RefusedAddress(f"port {port} is not a port webhooks are sent to")
    return hostname, port or (443 if parts.scheme == "https" else 80)


def literal_address(host: str) -> str | None:
    """The IP address a host names without DNS (an IP literal, or a number inet_aton reads), else None."""
    bare = host.strip("[]")
    try:
        return str(ipaddress.ip_address(bare.split("%", 1)[0]))  # a zone ("fe80::1%eth0") changes nothing
    except ValueError:
        pass
    if _INET_ATON.fullmatch(bare):
        try:
            return socket.inet_ntoa(socket.inet_aton(bare))
        except OSError:
            return None
    return None


def delivery_refusal(url: str, allow_private: bool) -> str | None:
    """Why a webhook to `url` can never be delivered, as far as can be told without DNS; None if it may be."""
    try:
        host, _ = host_of(url)
    except RefusedAddress as exc:
        return str(exc)
    if allow_private:
        return None
    if _LOOPBACK_NAME.fullmatch(host):
        return f"{host} is a loopback name"
    address = literal_address(host)
    return why_refused(address) if address is not None else None


MAX_URL_CHARS = 2000
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# A last label that starts with a letter: no spelling of a number inet_aton reads ("0x7f.1", "2130706433").
_NAME = rf"(?:{_LABEL}\.)*[A-Za-z](?:[A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?\.?"
_NOT_LOCALHOST = r"(?!(?:[A-Za-z0-9-]+\.)*[Ll][Oo][Cc][Aa][Ll][Hh][Oo][Ss][Tt]\.?(?:[:/?#]|$))"
_ANY_NAME = rf"(?:{_LABEL}\.)*{_LABEL}\.?"  # also 127.0.0.1, 0x7f.1, localhost
_IPV6 = r"\[(?:(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}|::1)\]"
# 1-65535 without leading zeros, less REFUSED_PORTS (0 and 22).
_PORT = (r"(?:[1-9]|1[0-9]|2[013-9]|[3-9][0-9]|[1-9][0-9]{2,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}"
         r"|655[0-2][0-9]|6553[0-5])")
_REST = r"(?:[/?#][!-~]*)?"  # printable ASCII, no space (RFC 3986: anything else percent-encoded)
_SCHEME = r"https?://"  # lower case, as submission.CALLBACK asks


def callback_pattern(allow_private: bool) -> str:
    """The form a callback_url must have at submit, as a regex that reads the same in Python's re and
    ECMA-262 (JSON Schema): http(s), a host, an optional port other than 0 and 22, then an optional path,
    query or fragment of printable ASCII; at most MAX_URL_CHARS characters (the document's maxLength). Host:
    a DNS name that is not a localhost name, or, where private addresses are allowed, also an IPv4 literal
    (any inet_aton spelling), `localhost` or a bracketed IPv6 address (all 8 groups, or ::1)."""
    host = f"(?:{_ANY_NAME}|{_IPV6})" if allow_private else f"{_NOT_LOCALHOST}{_NAME}"
    return f"^{_SCHEME}{host}(?::{_PORT})?{_REST}$"


@lru_cache(maxsize=2)
def _form(allow_private: bool) -> re.Pattern[str]:
    return re.compile(callback_pattern(allow_private))


def url_refusal(url: str, allow_private: bool) -> str | None:
    """Why the gateway refuses `url` as a callback_url at submit: not of the documented form
    (callback_pattern), or never deliverable (delivery_refusal); None if accepted."""
    why = delivery_refusal(url, allow_private)  # the more precise reason, where it has one
    if why is not None:
        return why
    if len(url) > MAX_URL_CHARS:
        return f"longer than {MAX_URL_CHARS} characters"
    if not _form(allow_private).fullmatch(url):
        return ("not of the form http(s)://HOST[:PORT][/path...], HOST a DNS name"
                + (" or an IP literal" if allow_private else " (IP literals are refused: give a name)")
                + ", all in printable ASCII without spaces")
    return None
